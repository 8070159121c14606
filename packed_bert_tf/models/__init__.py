"""Packed BERT models: the config, the backbone (`BertBackbone`) and the
pre-training, SQuAD and classifier models that wrap it,
Google checkpoint and keras-hub weight I/O, ``.keras`` loading and SavedModel
export for serving.

The models import no TensorFlow (their layers are `keras.ops`), so they run
on any Keras backend. The I/O is imported on first use of its names: Google
checkpoints and SavedModel export, TensorFlow by nature; the keras-hub
conversion, which goes through the checkpoint names (and keras-hub imports
TensorFlow itself); and `load_model`, which reads local files without it.
"""

import importlib

from packed_bert_tf.models.backbone import BertBackbone
from packed_bert_tf.models.bert_classifier import BertClassifierModel
from packed_bert_tf.models.bert_pretraining import BertPretrainingModel
from packed_bert_tf.models.bert_squad import BertSquadModel
from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.models.packed_model import PackedModel

#: Name -> the module that defines it, imported on first use (TensorFlow I/O).
_TENSORFLOW_IO = {
    **dict.fromkeys(("export_for_serving", "serving_input_signature"),
                    "packed_bert_tf.models.export"),
    **dict.fromkeys(("CheckpointLoadReport", "google_named_weights",
                     "google_variable_shapes", "load_google_checkpoint",
                     "load_google_weights", "save_google_checkpoint"),
                    "packed_bert_tf.models.google_checkpoint"),
    **dict.fromkeys(("bert_config_from_keras_hub", "keras_hub_named_weights",
                     "load_keras_hub_backbone", "to_keras_hub_backbone",
                     "write_keras_hub_backbone", "write_keras_hub_vocabulary"),
                    "packed_bert_tf.models.keras_hub_weights"),
    **dict.fromkeys(("keras_file_class_name", "load_model"),
                    "packed_bert_tf.models.saving"),
}


def __getattr__(name):
    if name in _TENSORFLOW_IO:
        return getattr(importlib.import_module(_TENSORFLOW_IO[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BertBackbone", "BertClassifierModel", "BertConfig", "BertPretrainingModel", "BertSquadModel",
           "CheckpointLoadReport", "PackedModel", "bert_config_from_keras_hub",
           "export_for_serving", "google_named_weights", "google_variable_shapes",
           "keras_file_class_name", "keras_hub_named_weights", "load_google_checkpoint",
           "load_google_weights", "load_keras_hub_backbone", "load_model",
           "save_google_checkpoint", "serving_input_signature", "to_keras_hub_backbone",
           "write_keras_hub_backbone", "write_keras_hub_vocabulary"]
