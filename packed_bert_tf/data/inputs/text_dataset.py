"""tf.data pre-training batches straight from text: read, tokenized, cut into
sequences, masked afresh each time and packed as they are read.

Letters: B batch, S sequence length, P masked-LM slots per sequence.

One replica's stream, epoch after epoch::

    text files -> (Python: `text_sequences`) unmasked sequences of the epoch,
         shuffled through a buffer (seeded by seed and epoch)
      -> masked (`DynamicMasker`, by seed, epoch and index in the epoch)
      -> the unpacked example features -> packed on the fly (`pack_dataset`)
         or padded, as records are -> batches in the packed layout

Every step is a pure function of (seed, epoch, replica), so a resumed run
that skips the rows it had read gets exactly the batches it would have had.
The files are shared between replicas as record files are
(`text_sequences.epoch_files`).

Tokenization and the cutting into sequences run in Python (the Rust
`tokenizers` library behind `tf.data.Dataset.from_generator`): the same
tokenizer as the offline tools, exactly google-research/bert's, and reading a
Hugging Face ``tokenizer.json`` as well as a ``vocab.txt``. A pipeline that
calls Python does not run on ``tf.data`` service workers; one generator per
replica keeps up with training on the CPU (BENCHMARKS.md).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import tensorflow as tf

from packed_bert_tf.data.inputs.dynamic_masking import DynamicMasker, MaskingOptions
from packed_bert_tf.data.inputs.pretraining_dataset import (
    ReplicaBatches,
    Shuffling,
    batch_examples,
    pipeline_replicas,
    take_in_turn,
)
from packed_bert_tf.data.inputs.text_sequences import TextSequenceOptions, text_sequences
from packed_bert_tf.data.tokenization import WordPieceTokenizer

#: Epochs a training stream goes through: as good as forever.
_EPOCHS = 1 << 40


@dataclasses.dataclass(frozen=True)
class TextInput:
    """Where the text is and how it becomes masked sequences.

    Attributes:
      files: the text files (one sentence per line, blank lines between
        documents).
      vocab_file: a WordPiece ``vocab.txt`` or a Hugging Face ``tokenizer.json``.
      do_lower_case: lower-case the text (uncased models).
      sequences: the objective and S (`TextSequenceOptions`).
      masking: P, the masked share and whole-word masking (`MaskingOptions`).
    """

    files: tuple
    vocab_file: str
    do_lower_case: bool
    sequences: TextSequenceOptions
    masking: MaskingOptions


def text_examples(text: TextInput, *, seed: int, shuffle_buffer_size: int,
                  replica: int = 0, num_replicas: int = 1,
                  epochs: int = _EPOCHS) -> tf.data.Dataset:
    """One replica's masked examples in the unpacked layout, epoch after epoch.

    Returns:
      tf.data.Dataset of dicts: int32 [S] ``input_ids``, ``input_mask``,
      ``segment_ids``; int32 [P] ``masked_lm_positions``, ``masked_lm_ids``;
      float32 [P] ``masked_lm_weights``; int32 [1] ``next_sentence_labels``
      (what an unpacked record parses to).
    """
    tokenizer = WordPieceTokenizer(text.vocab_file, do_lower_case=text.do_lower_case)
    masker = DynamicMasker(tokenizer.vocab, text.masking)
    length = text.sequences.max_seq_length
    signature = (tf.TensorSpec([length], tf.int32), tf.TensorSpec([length], tf.int32),
                 tf.TensorSpec([], tf.int32))

    def sequences_of(epoch):
        return text_sequences(text.files, tokenizer, text.sequences, seed=seed,
                              epoch=int(epoch), replica=replica,
                              num_replicas=num_replicas,
                              shuffle_buffer_size=shuffle_buffer_size)

    def example(index, sequence, epoch):
        input_ids, segment_ids, label = sequence
        masked = masker(input_ids, seed, epoch, index)
        return {"input_ids": masked["input_ids"],
                "input_mask": tf.cast(input_ids != 0, tf.int32),
                "segment_ids": segment_ids,
                "masked_lm_positions": masked["masked_lm_positions"],
                "masked_lm_ids": masked["masked_lm_ids"],
                "masked_lm_weights": masked["masked_lm_weights"],
                "next_sentence_labels": label[None]}

    def epoch_examples(epoch):
        sequences = tf.data.Dataset.from_generator(
            sequences_of, output_signature=signature, args=(epoch,))
        return sequences.enumerate().map(
            lambda index, sequence: example(index, sequence, epoch),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    return tf.data.Dataset.range(epochs).flat_map(epoch_examples)


def text_pretraining_dataset(text: TextInput, batch_size: int, *,
                             input_context: tf.distribute.InputContext | None = None,
                             shuffling: Shuffling = Shuffling(),
                             batches: ReplicaBatches = ReplicaBatches()) -> tf.data.Dataset:
    """Training batches in the packed layout from text, as
    `packed_bert_tf.data.inputs.pretraining_dataset.pretraining_dataset` gives them from records.

    Args:
      text: the files and how they become sequences (`TextInput`).
      batch_size: the global batch size (rows: packs when packing).
      input_context: this pipeline's place among the replicas.
      shuffling: the seed (0 when None: the stream must be the same on every
        replica and at every resume) and the shuffle buffer.
      batches: rows to skip (a resumed run), micro-batches and packing on the
        fly (``pack_on_the_fly``; else one sequence per row).

    Returns:
      tf.data.Dataset of dicts of static shapes, forever.
    """
    replicas, num_replicas = pipeline_replicas(input_context)
    per_replica_batch = (batch_size if input_context is None
                         else input_context.get_per_replica_batch_size(batch_size))
    seed = 0 if shuffling.seed is None else shuffling.seed
    streams = []
    for replica in replicas:
        examples = text_examples(text, seed=seed,
                                 shuffle_buffer_size=shuffling.shuffle_buffer_size,
                                 replica=replica, num_replicas=num_replicas)
        streams.append(batch_examples(
            examples, batch_size=per_replica_batch,
            max_seq_length=text.sequences.max_seq_length, packing=batches.pack_on_the_fly,
            seed=seed, skip_rows=batches.skip_rows))
    if batches.micro_batches is not None:
        streams = [stream.batch(batches.micro_batches, drop_remainder=True)
                   for stream in streams]
    return take_in_turn(streams).prefetch(tf.data.AUTOTUNE)


def text_files_of(patterns: str | Sequence[str], flag: str = "input_text_file") -> tuple:
    """The files of comma-separated globs, sorted (every match: a ``.txt`` too).

    Raises:
      ValueError: naming the flag, for a pattern that matches nothing.
    """
    from packed_bert_tf.filesystem import expand_file_patterns_with_glob

    return tuple(expand_file_patterns_with_glob(patterns, glob=tf.io.gfile.glob, flag=flag))


__all__ = ["TextInput", "text_examples", "text_files_of", "text_pretraining_dataset"]
