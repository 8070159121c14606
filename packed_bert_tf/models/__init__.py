"""Packed BERT models: the config, the pre-training, SQuAD and classifier models,
Google checkpoint I/O."""

from packed_bert_tf.models.bert_classifier import BertClassifierModel
from packed_bert_tf.models.bert_pretraining import BertPretrainingModel
from packed_bert_tf.models.bert_squad import BertSquadModel
from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.models.google_checkpoint import (CheckpointLoadReport,
                                                     google_variable_shapes,
                                                     load_google_checkpoint,
                                                     save_google_checkpoint)

__all__ = ["BertClassifierModel", "BertConfig", "BertPretrainingModel", "BertSquadModel",
           "CheckpointLoadReport", "google_variable_shapes", "load_google_checkpoint", "save_google_checkpoint"]
