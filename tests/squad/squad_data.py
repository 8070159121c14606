"""Small SQuAD-format files and vocabularies written by the tests themselves."""

import json
import pathlib

import numpy as np
from tokenizers import normalizers

from packed_bert_tf.data.tokenization import SPECIAL_TOKENS, WordPieceTokenizer
from packed_bert_tf.models import BertConfig
from packed_bert_tf.squad.features import SquadFeatures

# Accents, capitals, punctuation glued to words, and a context long enough for
# several doc-stride windows at max_seq_length=32.
CONTEXT = ("Zoë Dupré was born in Besançon (France) in 1895. She studied at the "
           "École Normale until 1915, then moved to Paris. Her brother, Jérôme, "
           "stayed in Besançon.")
# (question, answer, which occurrence of the answer in the context)
QUESTIONS = [
    ("Where was Zoë born?", "Besançon", 0),
    ("When was she born?", "1895", 0),
    ("Where did she move?", "Paris", 0),
    ("Who is her brother?", "Jérôme", 0),
    ("Which school did she attend?", "École Normale", 0),
    ("Where did her brother stay?", "Besançon", 1),
    ("Where is Besançon?", "France", 0),
    ("Who was born in 1895?", "Zoë Dupré", 0),
]
SECOND_CONTEXT = "The  Rhône\nflows through Lyon; Lyon lies east of Clermont."
SECOND_QUESTIONS = [("What flows through Lyon?", "The  Rhône", 0),
                    ("Which city lies east of Clermont?", "Lyon", 1)]
# Whole words in the vocabulary (as normalised); other words split into characters.
WORDS = ("zoë was born in besançon france she studied at the école normale until "
         "then moved to paris her brother stayed where when who did which is lyon "
         "flows through lies east of").split()


def answer_start(context, answer, occurrence=0):
    start = -1
    for _ in range(occurrence + 1):
        start = context.index(answer, start + 1)
    return start


def qa(qas_id, context, question, answer, occurrence=0, *, answers=None):
    if answers is None:
        answers = [{"text": answer, "answer_start": answer_start(context, answer,
                                                                  occurrence)}]
    return {"id": qas_id, "question": question, "answers": answers}


def squad_dataset(paragraphs):
    """SQuAD JSON of [(context, [(question, answer, occurrence), ...]), ...]."""
    return {"version": "1.1", "data": [{"title": "test", "paragraphs": [
        {"context": context,
         "qas": [qa(f"p{p}q{q}", context, *item) for q, item in enumerate(questions)]}
        for p, (context, questions) in enumerate(paragraphs)]}]}


def default_dataset():
    return squad_dataset([(CONTEXT, QUESTIONS), (SECOND_CONTEXT, SECOND_QUESTIONS)])


def write_json(path, value):
    path.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")
    return str(path)


def write_vocab(path, texts, *, do_lower_case=True, words=WORDS):
    """A vocabulary of every character (and its ## piece) of the texts plus `words`."""
    normalizer = normalizers.BertNormalizer(lowercase=do_lower_case)
    characters = sorted(set(normalizer.normalize_str(" ".join(texts))) - {" "})
    words = [normalizer.normalize_str(w) for word in words
             for w in (word, word.capitalize())]
    tokens = list(SPECIAL_TOKENS) + characters + ["##" + c for c in characters]
    tokens += [word for word in dict.fromkeys(words) if word not in tokens]
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


def tokenizer_for(tmp_path, dataset, *, do_lower_case=True):
    texts = [paragraph["context"] + " " + qa["question"]
             for article in dataset["data"] for paragraph in article["paragraphs"]
             for qa in paragraph["qas"]]
    vocab = write_vocab(tmp_path / f"vocab-{do_lower_case}.txt", texts,
                        do_lower_case=do_lower_case)
    return WordPieceTokenizer(vocab, do_lower_case=do_lower_case)


# A learnable toy task: find the one colour among the filler words.
LEARNABLE_KEYS = ["alpha", "bravo", "delta", "gamma", "kilo", "lima"]
LEARNABLE_VALUES = ["red", "blue", "green", "black", "white", "pink", "gold", "gray"]


def learnable_dataset(num_paragraphs, *, seed=0):
    """Contexts of 2-6 filler words with one colour somewhere; "? " -> the colour."""
    rng = np.random.default_rng(seed)
    paragraphs = []
    for _ in range(num_paragraphs):
        words = list(rng.choice(LEARNABLE_KEYS, rng.integers(2, 7)))
        value = str(rng.choice(LEARNABLE_VALUES))
        words.insert(int(rng.integers(0, len(words) + 1)), value)
        context = " ".join(words)
        paragraphs.append((context, [("?", value, 0)]))
    return squad_dataset(paragraphs)


def learnable_vocab(path):
    tokens = list(SPECIAL_TOKENS) + ["?"] + LEARNABLE_KEYS + LEARNABLE_VALUES
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


def tiny_config(vocab_size, **overrides) -> BertConfig:
    """A 2-layer model of hidden size 32, without dropout."""
    values = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=64, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0, max_position_embeddings=64,
                  initializer_range=0.2)
    values.update(overrides)
    return BertConfig(**values)


def write_learnable_files(folder, *, train_paragraphs=96, predict_paragraphs=24,
                          **config_overrides) -> dict:
    """run_squad's input flags (vocab, config of `tiny_config` with
    ``config_overrides``, train and predict files of `learnable_dataset`) ->
    paths written in ``folder``."""
    vocab = learnable_vocab(folder / "vocab.txt")
    config = folder / "bert_config.json"
    vocab_size = len(pathlib.Path(vocab).read_text().split())
    tiny_config(vocab_size, **config_overrides).to_json_file(str(config))
    return {
        "vocab_file": vocab, "bert_config_file": str(config),
        "train_file": write_json(folder / "train.json",
                                 learnable_dataset(train_paragraphs, seed=0)),
        "predict_file": write_json(folder / "dev.json",
                                   learnable_dataset(predict_paragraphs, seed=1)),
    }


def make_features(lengths, max_seq_length, *, seed=0, vocab_size=None):
    """Features of the given lengths with labels inside; token ids 100 (f + 1) +
    position (distinct), or random below ``vocab_size`` when given."""
    rng = np.random.default_rng(seed)
    num = len(lengths)
    input_ids = np.zeros((num, max_seq_length), np.int32)
    segment_ids = np.zeros((num, max_seq_length), np.int8)
    start = np.zeros(num, np.int32)
    end = np.zeros(num, np.int32)
    for f, length in enumerate(lengths):
        input_ids[f, :length] = (100 * (f + 1) + np.arange(length) if vocab_size is None
                                 else rng.integers(1, vocab_size, length))
        segment_ids[f, length // 2:length] = 1
        start[f] = rng.integers(0, length)
        end[f] = rng.integers(start[f], length)
    zeros = np.zeros((num, max_seq_length), np.int32)
    return SquadFeatures(input_ids=input_ids, segment_ids=segment_ids,
                         token_is_max_context=zeros.astype(np.int8),
                         token_char_start=zeros, token_char_end=zeros,
                         example_index=np.arange(num, dtype=np.int32),
                         doc_span_index=np.zeros(num, np.int32),
                         length=np.asarray(lengths, np.int32),
                         start_position=start, end_position=end)
