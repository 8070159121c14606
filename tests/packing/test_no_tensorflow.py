import subprocess
import sys


def test_the_packing_engine_never_imports_tensorflow():
    # Nor do the numpy modules of packed_bert_tf.data (the data-preparation
    # tools' Beam workers), though the package also offers pack_dataset.
    code = ("import sys, packed_bert_tf.packing, packed_bert_tf.packing.assign, "
            "packed_bert_tf.packing.streaming_packer, packed_bert_tf.packing.stream_packing, "
            "packed_bert_tf.data.packed.pretraining_records, "
            "packed_bert_tf.data.records.synthetic_records; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'keras')))")
    out = subprocess.run([sys.executable, "-c", code], check=True,
                         capture_output=True, text=True, timeout=300).stdout
    assert out.strip() == "[]"
