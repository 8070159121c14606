"""benchmarks/common.py's sections: one per script, a subsection per configuration,
a rerun replacing its own (`replace_subsection`), the list of sections
(`table_of_contents`). In-process, on small Markdown strings."""

import importlib.util

import pytest
from absl import flags

from tests.tool_runs import REPOSITORY

# Loaded from its file: a module named ``common`` on the path could be another.
_SPEC = importlib.util.spec_from_file_location("benchmarks_common",
                                               REPOSITORY / "benchmarks" / "common.py")
common = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(common)

PAGE = """# Benchmarks

Intro.

<!-- contents:begin -->
<!-- contents:end -->

<!-- peer:begin -->
## Peer step time (CPU)

<!-- peer/default:begin -->
### float32

Command: `python benchmarks/peer.py`
Old float32 figures.
<!-- peer/default:end -->

<!-- peer/mixed_precision=bf16:begin -->
### bf16

Command: `python benchmarks/peer.py --mixed_precision=bf16`
Old bf16 figures.
<!-- peer/mixed_precision=bf16:end -->

Notes written by hand.
<!-- peer:end -->

<!-- other:begin -->
## Other

<!-- other/default:begin -->
Command: `python benchmarks/other.py`
Other figures.
<!-- other/default:end -->
<!-- other:end -->
"""


def test_a_rerun_replaces_its_own_subsection_only():
    new = common.replace_subsection(PAGE, "peer", "Peer step time (CPU)", "mixed_precision=bf16",
                                    "### bf16\n\nCommand: `...`\nNew bf16 figures.\n")
    assert new == PAGE.replace(
        "Command: `python benchmarks/peer.py --mixed_precision=bf16`\nOld bf16 figures.",
        "Command: `...`\nNew bf16 figures.")
    # Twice: the same text, nothing appended.
    assert common.replace_subsection(new, "peer", "Peer step time (CPU)",
                                     "mixed_precision=bf16",
                                     "### bf16\n\nCommand: `...`\nNew bf16 figures.") == new


def test_a_new_configuration_goes_after_the_sections_last_subsection():
    new = common.replace_subsection(PAGE, "peer", "Peer step time (CPU)", "dropout=0.0",
                                    "### dropout 0\n\nNew figures.")
    assert new == PAGE.replace(
        "<!-- peer/mixed_precision=bf16:end -->\n",
        "<!-- peer/mixed_precision=bf16:end -->\n\n<!-- peer/dropout=0.0:begin -->\n"
        "### dropout 0\n\nNew figures.\n<!-- peer/dropout=0.0:end -->\n")
    assert new.count("## ") - new.count("### ") == 2  # still one ## line per section


def test_a_new_script_gets_a_section_at_the_end_and_the_title_is_the_scripts():
    new = common.replace_subsection(PAGE, "fresh", "Fresh", "default", "Command: `x`")
    assert new == PAGE + ("\n<!-- fresh:begin -->\n## Fresh\n\n<!-- fresh/default:begin -->\n"
                          "Command: `x`\n<!-- fresh/default:end -->\n<!-- fresh:end -->\n")
    renamed = common.replace_subsection(PAGE, "other", "Other, renamed", "default", "Same.")
    assert "## Other, renamed\n" in renamed and "## Other\n" not in renamed
    assert "<!-- peer:begin -->" in renamed and renamed.count("Old bf16 figures.") == 1


def test_a_section_with_no_subsection_yet_gets_it_under_its_title():
    page = "<!-- s:begin -->\n## S\n\nNotes.\n<!-- s:end -->\n"
    assert common.replace_subsection(page, "s", "S", "default", "Figures.") == (
        "<!-- s:begin -->\n## S\n\n<!-- s/default:begin -->\nFigures.\n"
        "<!-- s/default:end -->\n\nNotes.\n<!-- s:end -->\n")


@pytest.mark.parametrize("section, subsection", [("a/b", "default"), ("a", "x -->"),
                                                 ("a", "two\nlines"), ("a", "")])
def test_names_that_would_break_the_markers_are_refused(section, subsection):
    with pytest.raises(ValueError):
        common.replace_subsection(PAGE, section, "T", subsection, "body")


def test_the_table_of_contents_has_one_line_per_section():
    new = common.table_of_contents(PAGE)
    assert new == PAGE.replace(
        "<!-- contents:begin -->\n",
        "<!-- contents:begin -->\n"
        "- [Peer step time (CPU)](#peer-step-time-cpu): `benchmarks/peer.py`\n"
        "- [Other](#other): `benchmarks/other.py`\n")
    assert common.table_of_contents(new) == new
    assert common.table_of_contents("# No list\n") == "# No list\n"


def _parsed(*argv) -> flags.FlagValues:
    values = flags.FlagValues()
    flags.DEFINE_list("num_layers", ["2", "4", "8"], "", flag_values=values)
    flags.DEFINE_float("dropout", 0.1, "", flag_values=values)
    flags.DEFINE_multi_string("beam_args", ["default"], "", flag_values=values)
    values(["script", *argv])
    return values


@pytest.mark.parametrize("argv, key", [
    ((), "default"),
    (("--num_layers=2,4,8", "--dropout=0.1"), "default"),  # the defaults, given
    (("--dropout=0", "--num_layers=4"), "num_layers=4 dropout=0.0"),
    (("--beam_args=default", "--beam_args=--x=1"), "beam_args=default,--x=1")])
def test_the_configuration_is_the_flags_off_their_defaults(monkeypatch, argv, key):
    monkeypatch.setattr(common, "FLAGS", _parsed(*argv))
    assert common.configuration(("num_layers", "dropout", "beam_args")) == key


def test_github_anchors():
    assert common.anchor("Packed BERT against keras-hub's BertMaskedLM, step time (CPU)") \
        == "packed-bert-against-keras-hubs-bertmaskedlm-step-time-cpu"
    assert common.anchor("Pre-training straight from text against pre-packed records (the "
                         "training loop of `run_pretraining.py`, CPU)") == (
        "pre-training-straight-from-text-against-pre-packed-records-the-training-loop-of-"
        "run_pretrainingpy-cpu")
