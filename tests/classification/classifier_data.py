"""Vocabularies, tiny configs and learnable GLUE-format sets written by the tests."""

import numpy as np

from packed_bert_tf.classification.glue import InputExample
from packed_bert_tf.models import BertConfig
from tests.classification.glue_files import write_tsv
from tests.squad.squad_data import write_vocab

# Whole words in the vocabulary; "good" decides the toy task's label.
WORDS = ("the a film movie plot actor scene story music was is very quite rather "
         "dull long short funny slow bright dark good").split()
FILLER = WORDS[:-1]
TRUNCATION_TEXTS = ["Zoë's café, très chic!", "Unaffable actors", "a b c d e f g h",
                    "the movie was good"]


def write_classifier_vocab(path) -> str:
    """Every letter (and its ## piece) plus `WORDS` (as `write_vocab` makes them)."""
    return write_vocab(path, ["abcdefghijklmnopqrstuvwxyz0123456789.,!?'"]
                       + TRUNCATION_TEXTS, words=WORDS)


def tiny_config(vocab_size: int, **overrides) -> BertConfig:
    values = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=64, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0, max_position_embeddings=64,
                  type_vocab_size=2, initializer_range=0.02)
    values.update(overrides)
    return BertConfig(**values)


def toy_sentences(num: int, seed: int):
    """(sentences of 2..12 filler words, half of them with "good" somewhere; labels)."""
    rng = np.random.default_rng(seed)
    sentences, labels = [], []
    for _ in range(num):
        words = list(rng.choice(FILLER, rng.integers(2, 13)))
        label = int(rng.integers(0, 2))
        if label:
            words.insert(int(rng.integers(0, len(words) + 1)), "good")
        sentences.append(" ".join(words))
        labels.append(label)
    return sentences, labels


def write_sst2(folder, *, train=384, dev=96, test=48) -> str:
    """SST-2-format train/dev/test TSVs of the toy task (label: "good" occurs)."""
    train_text, train_labels = toy_sentences(train, 0)
    dev_text, dev_labels = toy_sentences(dev, 1)
    test_text, _ = toy_sentences(test, 2)
    write_tsv(str(folder / "train.tsv"), [["sentence", "label"]] + [
        [text, str(label)] for text, label in zip(train_text, train_labels)])
    write_tsv(str(folder / "dev.tsv"), [["sentence", "label"]] + [
        [text, str(label)] for text, label in zip(dev_text, dev_labels)])
    write_tsv(str(folder / "test.tsv"), [["index", "sentence"]] + [
        [str(i), text] for i, text in enumerate(test_text)])
    return str(folder)


def write_files(folder, **config_overrides) -> dict:
    """run_classifier's input flags for the toy SST-2 task, written in ``folder``."""
    vocab = write_classifier_vocab(folder / "vocab.txt")
    vocab_size = len(open(vocab, encoding="utf-8").read().split())
    config = folder / "bert_config.json"
    tiny_config(vocab_size, **config_overrides).to_json_file(str(config))
    data = folder / "SST-2"
    data.mkdir()
    return {"vocab_file": vocab, "bert_config_file": str(config),
            "data_dir": write_sst2(data), "task_name": "SST-2"}


def random_examples(num: int, seed: int, *, pairs: bool, regression: bool = False):
    """InputExamples of random filler sentences (1..20 words each)."""
    rng = np.random.default_rng(seed)

    def sentence():
        return " ".join(rng.choice(FILLER, rng.integers(1, 21)))
    return [InputExample(guid=f"train-{i}", text_a=sentence(),
                         text_b=sentence() if pairs else None,
                         label=(f"{rng.uniform(0, 5):.2f}" if regression
                                else str(rng.integers(0, 2))))
            for i in range(num)]
