"""Packed BERT models: the config, the pre-training and SQuAD models, Google checkpoint
I/O, ``.keras`` loading and SavedModel export for serving."""

from packed_bert_tf.models.bert_pretraining import BertPretrainingModel
from packed_bert_tf.models.bert_squad import BertSquadModel
from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.models.export import export_for_serving, serving_input_signature
from packed_bert_tf.models.google_checkpoint import (CheckpointLoadReport,
                                                     google_variable_shapes,
                                                     load_google_checkpoint,
                                                     save_google_checkpoint)
from packed_bert_tf.models.packed_model import PackedModel
from packed_bert_tf.models.saving import keras_file_class_name, load_model

__all__ = ["BertConfig", "BertPretrainingModel", "BertSquadModel", "CheckpointLoadReport",
           "PackedModel", "export_for_serving", "google_variable_shapes",
           "keras_file_class_name", "load_google_checkpoint", "load_model",
           "save_google_checkpoint", "serving_input_signature"]
