"""run_classifier.py's sentence (pair) classifier per packed sequence.

Letters: B batch, S sequence length, D max sequences per pack, H hidden,
L labels (1 for regression).

Every sequence of a pack has its own [CLS]; the backbone's pooler and the
classifier run at each of them (``cls_positions``), so a pack of D
sequences gets D predictions (S = 8, D = 2)::

    input_ids    C a1 a2 S  C b1 S  0
    input_mask   1  1  1 1  2  2 2  0
    cls_positions 0 4          label_ids 1 0      sequence_weights 1 1

The loss is the model's (`packed_bert_tf.models.bert_classifier`).
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class SequenceClassificationHead(keras.layers.Layer):
    """Dropout and the classifier (L outputs) on each packed sequence's pooled [CLS].

    As run_classifier.py's ``create_model``: the pooled [CLS] output (the
    backbone's, `packed_bert_tf.models.BertBackbone` at ``cls_positions``),
    dropout (training only), ``output_weights`` / ``output_bias``; here for
    every sequence of a pack.

    Args:
      num_labels: L (1 for regression).
      initializer_range: stddev of the truncated-normal kernel.
      dropout_rate: dropout on the pooled output (the reference's 0.1 =
        ``hidden_dropout_prob``).

    Call arguments:
      pooled_output: [B, D, H] the pooler's output at each sequence's [CLS]
        (empty slots hold anything; their weight is 0).
      training: dropout on.

    Returns:
      logits [B, D, L] float32.
    """

    def __init__(self, num_labels: int, initializer_range: float = 0.02,
                 dropout_rate: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {num_labels}")
        self.num_labels = num_labels
        self.initializer_range = initializer_range
        self.dropout_rate = dropout_rate

    def build(self, pooled_output_shape):
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)
        self.classifier = keras.layers.Dense(
            self.num_labels, kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=self.initializer_range),
            dtype=self.dtype_policy, name="output")
        self.classifier.build(pooled_output_shape)
        self.built = True

    def call(self, pooled_output, training=False):
        pooled_output = self.dropout(pooled_output, training=training)
        return ops.cast(self.classifier(pooled_output), "float32")  # [B, D, L]

    def get_config(self):
        config = super().get_config()
        config.update(num_labels=self.num_labels,
                      initializer_range=self.initializer_range,
                      dropout_rate=self.dropout_rate)
        return config
