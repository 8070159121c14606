"""tf.data batches straight from text: masks drawn afresh each epoch as a pure
function of (seed, epoch, sequence), the same batches after a skip, packed."""

import dataclasses

import numpy as np
import pytest

from packed_bert_tf.data.inputs.dynamic_masking import MaskingOptions
from packed_bert_tf.data.inputs.pack_dataset import PackOnTheFly
from packed_bert_tf.data.inputs.pretraining_dataset import ReplicaBatches, Shuffling
from packed_bert_tf.data.inputs.text_dataset import (
    TextInput,
    text_examples,
    text_pretraining_dataset,
)
from packed_bert_tf.data.inputs.text_sequences import TextSequenceOptions
from packed_bert_tf.data.tokenization import SPECIAL_TOKENS

S, P = 32, 5
WORDS = [f"w{i}" for i in range(50)]


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    folder = tmp_path_factory.mktemp("text")
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join([*SPECIAL_TOKENS, *WORDS]) + "\n")
    rng = np.random.default_rng(0)
    corpus = folder / "corpus.txt"
    corpus.write_text("\n\n".join(
        "\n".join(" ".join(rng.choice(WORDS, rng.integers(2, 12)))
                  for _ in range(rng.integers(1, 6))) for _ in range(30)) + "\n")
    return TextInput((str(corpus),), str(vocab), True, TextSequenceOptions("mlm", S),
                     MaskingOptions(P))


def _examples(text, epochs, **kwargs):
    dataset = text_examples(text, seed=7, shuffle_buffer_size=1, epochs=epochs, **kwargs)
    return [{name: value.numpy() for name, value in example.items()}
            for example in dataset]


def _unmasked(example):
    ids = example["input_ids"].copy()
    used = example["masked_lm_weights"] > 0
    ids[example["masked_lm_positions"][used]] = example["masked_lm_ids"][used]
    return ids


def test_each_epoch_masks_the_same_sequences_afresh(text):
    examples = _examples(text, epochs=2)
    half = len(examples) // 2
    assert half > 20 and len(examples) == 2 * half
    first, second = examples[:half], examples[half:]
    for one, two in zip(first, second):  # one file, no shuffle: the same sequences
        np.testing.assert_array_equal(_unmasked(one), _unmasked(two))
        np.testing.assert_array_equal(one["input_mask"], two["input_mask"])
    differ = sum(not np.array_equal(one["masked_lm_positions"], two["masked_lm_positions"])
                 for one, two in zip(first, second))
    assert differ > 0.8 * half
    # A pure function of (seed, epoch, sequence): built again, bit for bit.
    for one, again in zip(examples, _examples(text, epochs=2)):
        for name in one:
            np.testing.assert_array_equal(one[name], again[name], err_msg=name)


def test_a_skip_gives_the_batches_that_follow(text):
    # Sentence pairs, half of them short: packs of several.
    text = dataclasses.replace(text, sequences=TextSequenceOptions("nsp", S,
                                                                   short_seq_prob=0.5))

    def batches(skip_rows, count):
        dataset = text_pretraining_dataset(
            text, 4, shuffling=Shuffling(seed=3, shuffle_buffer_size=8),
            batches=ReplicaBatches(skip_rows=skip_rows,
                                   pack_on_the_fly=PackOnTheFly(3, 16)))
        return [{name: value.numpy() for name, value in batch.items()}
                for batch in dataset.take(count)]

    everything = batches(0, 12)
    assert everything[0]["input_ids"].shape == (4, S)
    assert everything[0]["next_sentence_weights"].shape == (4, 3)
    assert sum(batch["next_sentence_weights"].sum() for batch in everything) > 1.1 * 48
    later = batches(4 * 5, 7)  # rows: five batches of four packs
    for want, got in zip(everything[5:], later):
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
