"""Packed BERT models: the config, the pre-training, SQuAD and classifier models,
Google checkpoint and keras-hub weight I/O."""

from packed_bert_tf.models.bert_classifier import BertClassifierModel
from packed_bert_tf.models.bert_pretraining import BertPretrainingModel
from packed_bert_tf.models.bert_squad import BertSquadModel
from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.models.google_checkpoint import (CheckpointLoadReport,
                                                     google_named_weights,
                                                     google_variable_shapes,
                                                     load_google_checkpoint,
                                                     load_google_weights,
                                                     save_google_checkpoint)
from packed_bert_tf.models.keras_hub_weights import (bert_config_from_keras_hub,
                                                     keras_hub_named_weights,
                                                     load_keras_hub_backbone,
                                                     to_keras_hub_backbone,
                                                     write_keras_hub_backbone,
                                                     write_keras_hub_vocabulary)

__all__ = ["BertClassifierModel", "BertConfig", "BertPretrainingModel", "BertSquadModel",
           "CheckpointLoadReport", "bert_config_from_keras_hub", "google_named_weights",
           "google_variable_shapes", "keras_hub_named_weights", "load_google_checkpoint",
           "load_google_weights", "load_keras_hub_backbone", "save_google_checkpoint",
           "to_keras_hub_backbone", "write_keras_hub_backbone", "write_keras_hub_vocabulary"]
