"""packed_bert_tf: packed BERT (Krell et al., arXiv 2107.02027) in TensorFlow 2 / Keras 3."""

__version__ = "0.1.0"
