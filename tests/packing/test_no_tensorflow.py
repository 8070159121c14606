import subprocess
import sys


def test_the_packing_engine_never_imports_tensorflow():
    code = ("import sys, packed_bert_tf.packing, packed_bert_tf.packing.assign; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'keras')))")
    out = subprocess.run([sys.executable, "-c", code], check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == "[]"
