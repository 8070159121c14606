"""Pre-training data: record formats, fast TFRecord I/O, packing of records,
tf.data input pipelines, and packing on the fly (`pack_dataset`). See
``docs/formats.md`` for the formats.

`pack_dataset`, `PackSpec` and `PackOnTheFly` are imported on first use, so
that the numpy-only modules of this package (used by the data-preparation
tools and their Beam workers) do not load TensorFlow.
"""

__all__ = ["PackOnTheFly", "PackSpec", "pack_dataset"]


def __getattr__(name):
    if name == "PackSpec":
        from packed_bert_tf.data.packed_rows import PackSpec

        return PackSpec
    if name in __all__:
        from packed_bert_tf.data import streaming

        return getattr(streaming, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
