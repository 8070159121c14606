"""The repository stands on its own: an installed package carries what it reads,
and nothing refers to files beside the checkout."""

import pathlib
import re
import subprocess
import sys

from tests.tool_runs import REPOSITORY

# Paths that would reach outside a clone: a sibling folder of the checkout.
_OUTSIDE = re.compile(r"\.\./shared|shared/data|_REPOSITORY\.parent|parents\[[3-9]\]")


def _tracked_text_files():
    names = subprocess.run(["git", "ls-files"], cwd=REPOSITORY, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in names:
        if name == "tests/test_repository.py":  # its pattern names what it looks for
            continue
        path = REPOSITORY / name
        if path.suffix in {".py", ".md", ".json", ".toml", ".ini", ".cfg", ".txt"} \
                or path.name in {"Makefile", "run"}:
            yield name, path.read_text(encoding="utf-8", errors="replace")


def test_no_file_refers_to_folders_beside_the_checkout():
    offenders = [f"{name}: {match.group(0)}" for name, text in _tracked_text_files()
                 for match in _OUTSIDE.finditer(text)]
    assert not offenders, offenders


def test_the_built_package_carries_the_papers_histograms(tmp_path):
    # What `pip install .` copies: the packages and their package data.
    subprocess.run([sys.executable, "setup.py", "-q", "build_py",
                    f"--build-lib={tmp_path}"], cwd=REPOSITORY, check=True,
                   capture_output=True)
    shipped = sorted(p.name for p in
                     (tmp_path / "packed_bert_tf/packing/paper_histograms").iterdir())
    assert shipped == ["builtin_corpus_documents.json", "squad_1_1_384.json",
                       "wikipedia_512.json"]
    assert (tmp_path / "data_prep" / "pack_pretraining_data.py").is_file()
    assert pathlib.Path(tmp_path / "packed_bert_tf/packing/histograms.py").is_file()


# A NumPy-style section: a section name alone on its line, underlined by dashes.
_NUMPY_SECTION = re.compile(r"^\s+(Parameters|Returns|Yields|Raises|Attributes|Notes|"
                            r"Examples?|See Also)\n\s+-{3,}\s*$", re.M)


def test_docstrings_are_in_one_style_googles():
    offenders = [f"{name}: {match.group(1)}" for name, text in _tracked_text_files()
                 if name.endswith(".py") for match in _NUMPY_SECTION.finditer(text)]
    assert not offenders, offenders
