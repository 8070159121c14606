"""Pre-training data, in four subpackages by concern, beside the modules every
one of them uses. See ``docs/formats.md`` for the formats.

- `packed_bert_tf.data.records`: the record format (`records.record_format`),
  fast TFRecord I/O (the C codec, TensorFlow's fallback, record files),
  synthetic records and the verification of a packed set.
- `packed_bert_tf.data.packed`: the compact form and the packed layout
  (`packed.packed_rows`), pre-training records to the compact form and back
  (`packed.pretraining_records`), in numpy.
- `packed_bert_tf.data.inputs`: the ``tf.data`` inputs: pre-training datasets
  from records or from text, packing on the fly (`inputs.pack_dataset`), the
  rows the fine-tuning tasks read.
- `packed_bert_tf.data.preparation`: the offline makers that the
  ``data_prep`` tools run: pre-training instances, the Beam packing pipeline.
- Here: `text_files` and `tokenization` (file access and file patterns are
  `packed_bert_tf.filesystem`'s, below every package).

`pack_dataset`, `PackSpec` and `PackOnTheFly` are imported on first use, so
that the numpy-only modules of this package (used by the data-preparation
tools and their Beam workers) do not load TensorFlow.
"""

__all__ = ["PackOnTheFly", "PackSpec", "pack_dataset"]


def __getattr__(name):
    if name == "PackSpec":
        from packed_bert_tf.data.packed.packed_rows import PackSpec

        return PackSpec
    if name in __all__:
        from packed_bert_tf.data.inputs import pack_dataset

        return getattr(pack_dataset, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
