"""Hugging Face BERT folders written by `transformers` itself, for the front
ends' tests: a random model of a given `BertConfig`, with a vocab.txt."""

import dataclasses
import shutil

import pytest

from packed_bert_tf.models.pretrained_weights import load_pretrained_weights


def write_transformers_folder(folder, bert_config, vocab_file, *, hidden_act="gelu_new",
                              architecture="BertForPreTraining", num_labels=2, seed=0):
    """Saves a random ``transformers`` ``architecture`` of ``bert_config``'s sizes
    (its ``hidden_act`` replaced by Hugging Face's ``hidden_act``) with
    ``save_pretrained``, and ``vocab_file`` as its vocab.txt; returns the folder."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = transformers.BertConfig(**dict(dataclasses.asdict(bert_config),
                                            hidden_act=hidden_act), num_labels=num_labels)
    torch.manual_seed(seed)
    getattr(transformers, architecture)(config).save_pretrained(str(folder))
    shutil.copy(vocab_file, folder / "vocab.txt")
    return str(folder)


def as_google_checkpoint(folder, model, path):
    """The folder's weights loaded into ``model`` (built, any task) and written as
    an original BERT checkpoint at ``path``: the same weights in the form the
    front ends took before folders."""
    from packed_bert_tf.models import save_google_checkpoint

    load_pretrained_weights(model, folder, allow_partial=True)
    return save_google_checkpoint(model, str(path))
