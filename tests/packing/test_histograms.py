import json

import numpy as np
import pytest

from packed_bert_tf.packing import histograms, load_histogram


def test_json_object_list_npy_and_text(tmp_path):
    (tmp_path / "h.json").write_text(json.dumps(
        {"name": "tiny", "max_sequence_length": 6, "counts": [0, 1, 2, 0]}))
    (tmp_path / "bare.json").write_text("[3, 0, 1]")
    np.save(tmp_path / "h.npy", np.array([1, 2]))
    (tmp_path / "h.txt").write_text("4, 5\n6\n")
    loaded = load_histogram(str(tmp_path / "h.json"))
    assert loaded.name == "tiny" and loaded.max_sequence_length == 6
    np.testing.assert_array_equal(loaded.counts, [0, 1, 2, 0])
    bare = load_histogram(str(tmp_path / "bare.json"))
    assert bare.name == "bare" and bare.max_sequence_length == 3
    np.testing.assert_array_equal(load_histogram(str(tmp_path / "h.npy")).counts, [1, 2])
    np.testing.assert_array_equal(load_histogram(str(tmp_path / "h.txt")).counts, [4, 5, 6])


def test_names_are_found_on_the_search_path(tmp_path, monkeypatch):
    (tmp_path / "mine.json").write_text("[1, 2, 3]")
    monkeypatch.setenv(histograms.HISTOGRAM_DIR_ENV, str(tmp_path))
    assert histograms.histogram_search_path()[0] == tmp_path
    np.testing.assert_array_equal(load_histogram("mine").counts, [1, 2, 3])


@pytest.mark.parametrize("content, message", [
    ("[1, -2]", "non-negative whole counts"),
    ("[1.5]", "non-negative whole counts"),
    ('{"bins": [1]}', "no 'counts' list"),
    ("[]", "non-empty list of counts"),
    ("{not json", "cannot read histogram"),
])
def test_bad_files_are_rejected_naming_the_file(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as error:
        load_histogram(str(path))
    assert "bad.json" in str(error.value)


def test_an_unknown_name_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv(histograms.HISTOGRAM_DIR_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="neither a file nor a known name "
                       r"\(builtin_corpus_documents, squad_1_1_384, wikipedia_512; "
                       "looked in") as error:
        load_histogram("no_such_histogram")
    assert str(tmp_path) in str(error.value)
    assert histograms.HISTOGRAM_DIR_ENV in str(error.value)


@pytest.mark.parametrize("name, max_sequence_length, sequences", [
    ("wikipedia_512", 512, 16_279_552), ("squad_1_1_384", 384, 88_641)])
def test_the_papers_histograms_ship_with_the_package(monkeypatch, name,
                                                     max_sequence_length, sequences):
    monkeypatch.delenv(histograms.HISTOGRAM_DIR_ENV, raising=False)
    assert histograms.histogram_search_path() == [histograms.PACKAGED_HISTOGRAM_DIR]
    assert name in histograms.available_histograms()
    loaded = load_histogram(name)
    assert loaded.source == str(histograms.PACKAGED_HISTOGRAM_DIR / f"{name}.json")
    assert loaded.max_sequence_length == max_sequence_length
    assert loaded.counts.size == max_sequence_length
    assert int(loaded.counts.sum()) == sequences
    document = json.loads((histograms.PACKAGED_HISTOGRAM_DIR / f"{name}.json").read_text())
    assert "arXiv 2107.02027" in document["description"] and document["source"]


def test_a_users_folder_comes_before_the_packaged_histograms(tmp_path, monkeypatch):
    (tmp_path / "wikipedia_512.json").write_text("[1, 2]")
    monkeypatch.setenv(histograms.HISTOGRAM_DIR_ENV, str(tmp_path))
    np.testing.assert_array_equal(load_histogram("wikipedia_512").counts, [1, 2])


def test_the_builtin_corpus_document_lengths_ship_with_the_package():
    documents = load_histogram("builtin_corpus_documents")
    assert int(documents.counts.sum()) == 487
    assert documents.max_sequence_length == documents.counts.size == 8506
    assert (documents.counts * np.arange(1, 8507)).sum() == 393_100


def test_split_documents_cuts_long_documents_into_full_sequences():
    # One document length, 1000 tokens, no jitter: at S = 512 (510 tokens a
    # sequence beside [CLS] and [SEP]) each becomes 510 + 490 tokens.
    documents = np.zeros(1000, dtype=np.int64)
    documents[999] = 1
    counts = histograms.split_documents(documents, 512, num_documents=7, jitter=0.0)
    assert counts.size == 512
    assert counts[511] == 7 and counts[491] == 7 and counts.sum() == 14
    short = histograms.split_documents(documents, 2048, num_documents=3, jitter=0.0)
    assert short[1001] == 3 and short.sum() == 3


def test_split_documents_is_deterministic_per_seed():
    documents = load_histogram("builtin_corpus_documents").counts
    first = histograms.split_documents(documents, 2048, num_documents=5000, seed=4)
    np.testing.assert_array_equal(
        first, histograms.split_documents(documents, 2048, num_documents=5000, seed=4))
    assert not np.array_equal(
        first, histograms.split_documents(documents, 2048, num_documents=5000, seed=5))
    # At least one sequence per document (long ones make several).
    assert first.sum() > 5000


def test_split_documents_rejects_a_length_with_no_room():
    with pytest.raises(ValueError, match="max_sequence_length=2 leaves no room"):
        histograms.split_documents([1], 2, num_documents=1)
