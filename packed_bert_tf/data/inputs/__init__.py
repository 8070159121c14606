"""The ``tf.data`` inputs: pre-training datasets from records or straight from
text, packing on the fly, and the datasets of packed rows the fine-tuning
tasks read."""
