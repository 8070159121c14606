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


def write_sst2(folder, *, train=256, dev=96, test=48) -> str:
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


def random_features(lengths, max_seq_length: int, *, vocab_size: int, seed: int = 0,
                    num_labels: int = 2, pairs: bool = True):
    """`ClassifierFeatures` of the given lengths: random ids between [CLS] (2)
    and [SEP] (3) tokens, segment 1 on the second half of a pair, random labels
    (float targets in [0, 5) when ``num_labels`` is 1)."""
    from packed_bert_tf.classification.features import ClassifierFeatures
    from packed_bert_tf.packing import ragged

    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, np.int64)
    input_ids = rng.integers(5, vocab_size, int(lengths.sum())).astype(np.int32)
    row_splits = ragged.row_splits_from_lengths(lengths)
    input_ids[row_splits[:-1]] = 2
    input_ids[row_splits[1:] - 1] = 3
    position = ragged.position_in_row(lengths)
    segment_ids = np.zeros_like(input_ids)
    if pairs:
        segment_ids[position >= np.repeat(lengths // 2, lengths)] = 1
    labels = (rng.uniform(0, 5, lengths.size).astype(np.float32) if num_labels == 1
              else rng.integers(0, num_labels, lengths.size).astype(np.int32))
    return ClassifierFeatures(input_ids, segment_ids, row_splits, labels, max_seq_length)
