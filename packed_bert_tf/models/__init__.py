"""Packed BERT models: the config, the backbone (`BertBackbone`) and the
pre-training, SQuAD and classifier models that wrap it,
Google checkpoint and keras-hub weight I/O, ``.keras`` loading and SavedModel
export for serving."""

from packed_bert_tf.models.backbone import BertBackbone
from packed_bert_tf.models.bert_classifier import BertClassifierModel
from packed_bert_tf.models.bert_pretraining import BertPretrainingModel
from packed_bert_tf.models.bert_squad import BertSquadModel
from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.models.export import export_for_serving, serving_input_signature
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
from packed_bert_tf.models.packed_model import PackedModel
from packed_bert_tf.models.saving import keras_file_class_name, load_model

__all__ = ["BertBackbone", "BertClassifierModel", "BertConfig", "BertPretrainingModel", "BertSquadModel",
           "CheckpointLoadReport", "PackedModel", "bert_config_from_keras_hub",
           "export_for_serving", "google_named_weights", "google_variable_shapes",
           "keras_file_class_name", "keras_hub_named_weights", "load_google_checkpoint",
           "load_google_weights", "load_keras_hub_backbone", "load_model",
           "save_google_checkpoint", "serving_input_signature", "to_keras_hub_backbone",
           "write_keras_hub_backbone", "write_keras_hub_vocabulary"]
