"""Pre-training data: record formats, fast TFRecord I/O, packing of records,
and tf.data input pipelines. See ``docs/formats.md`` for the formats."""
