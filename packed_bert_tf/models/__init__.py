"""Packed BERT models: the config, the backbone (`BertBackbone`), the
pre-training, SQuAD and classifier models that take it (`PackedModel`; each
model's module holds its losses), Google checkpoint, keras-hub and Hugging
Face weight I/O, ``.keras`` loading and SavedModel export for serving.

The models import no TensorFlow (their layers are `keras.ops`), so they run
on any Keras backend. The I/O is imported on first use of its names: Google
checkpoints and SavedModel export, TensorFlow by nature; the keras-hub and
Hugging Face conversions, which go through the checkpoint names (and
keras-hub imports TensorFlow itself); and `load_model`, which reads local
files without it.
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
    **dict.fromkeys(("HuggingFaceFolder", "hugging_face_vocabulary", "is_hugging_face_folder",
                     "open_hugging_face_folder", "read_hugging_face_weights",
                     "save_hugging_face"),
                    "packed_bert_tf.models.hugging_face"),
    **dict.fromkeys(("keras_file_class_name", "load_model"),
                    "packed_bert_tf.models.saving"),
    **dict.fromkeys(("PretrainedWeights", "find_pretrained_weights", "from_preset",
                     "load_pretrained_weights"),
                    "packed_bert_tf.models.pretrained_weights"),
}


def __getattr__(name):
    if name in _TENSORFLOW_IO:
        return getattr(importlib.import_module(_TENSORFLOW_IO[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BertBackbone", "BertClassifierModel", "BertConfig", "BertPretrainingModel",
           "BertSquadModel", "CheckpointLoadReport", "HuggingFaceFolder",
           "PackedModel", "PretrainedWeights", "bert_config_from_keras_hub",
           "export_for_serving", "find_pretrained_weights", "from_preset",
           "google_named_weights", "google_variable_shapes", "hugging_face_vocabulary",
           "is_hugging_face_folder", "keras_file_class_name",
           "keras_hub_named_weights", "load_google_checkpoint", "load_google_weights",
           "load_keras_hub_backbone", "load_model", "load_pretrained_weights",
           "open_hugging_face_folder", "read_hugging_face_weights",
           "save_google_checkpoint", "save_hugging_face", "serving_input_signature",
           "to_keras_hub_backbone", "write_keras_hub_backbone",
           "write_keras_hub_vocabulary"]
