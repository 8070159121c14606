import os
import re

import numpy as np
import pytest

from packed_bert_tf.classification import glue
from packed_bert_tf.classification.glue import InputExample, get_task, read_examples
from tests.classification.glue_files import FILES, write_glue_files, write_tsv
from tests.tool_runs import run_tool


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return write_glue_files(str(tmp_path_factory.mktemp("glue")))


# (guids, labels, first example's text_a, its text_b) of every split, by hand
# from glue_files.FILES and the column table in glue's docstring.
EXPECTED = {
    ("cola", "train"): (["train-0", "train-1", "train-2"], ["1", "0", "1"],
                        "Our friends won't buy this analysis, let alone the next one we "
                        "propose.", None),
    ("cola", "dev"): (["dev-0", "dev-1"], ["1", "0"],
                      "The sailors rode the breeze clear of the rocks.", None),
    ("cola", "test"): (["test-1", "test-2"], [None, None],
                       "Bill whistled past the house.", None),
    ("mnli", "train"): (["train-0", "train-1"], ["neutral", "entailment"],
                        "Conceptually cream skimming has two basic dimensions - product and "
                        "geography.", "Product and geography are what make cream skimming "
                        "work. "),
    ("mnli", "dev"): (["dev_matched-0", "dev_matched-1"], ["neutral", "contradiction"],
                      "The new rights are nice enough",
                      "Everyone really likes the newest benefits "),
    ("mnli", "test"): (["test-0", "test-1"], [None, None],
                       "Hierbas, ans seco, ans dulce, and frigola are just a few names worth "
                       "keeping a look-out for.", "Hierbas is a name worth looking out for."),
    ("mrpc", "train"): (["train-1", "train-2", "train-3"], ["1", "0", "1"],
                        "Amrozi accused his brother , whom he called \" the witness \" , of "
                        "deliberately distorting his evidence .",
                        "Referring to him as only \" the witness \" , Amrozi accused his "
                        "brother of deliberately distorting his evidence ."),
    ("mrpc", "dev"): (["dev-1", "dev-2"], ["1", "0"],
                      "He said the foodservice pie business doesn 't fit the company 's "
                      "long-term growth strategy .",
                      "\" The foodservice pie business does not fit our long-term growth "
                      "strategy ."),
    ("mrpc", "test"): (["test-1", "test-2"], [None, None],
                       "PCCW 's chief operating officer , Mike Butcher , and Alex Arena , "
                       "the chief financial officer , will report directly to Mr So .",
                       "Current Chief Operating Officer Mike Butcher and Group Chief "
                       "Financial Officer Alex Arena will report to So ."),
    ("xnli", "train"): (["train-1", "train-2", "train-3"],
                        ["neutral", "entailment", "contradiction"],
                        "从 概念 上 看 , 奶油 收入 有 两 个 基本 方面 产品 和 地理 .",
                        "产品 和 地理 是 什么 使 奶油 抹 霜 工作 ."),
    ("xnli", "dev"): (["dev-2", "dev-4"], ["contradiction", "entailment"],
                      "他说，妈妈，我回来了。", "他一句话也没说。"),
    ("xnli", "test"): (["test-1", "test-3"], [None, None],
                       "嗯，我根本没想过，但是我很沮丧，最后我又和他说话了。", "我没有和他再说话。"),
    ("sst-2", "train"): (["train-1", "train-2", "train-3"], ["0", "0", "1"],
                         "hide new secretions from the parental units ", None),
    ("sst-2", "dev"): (["dev-1", "dev-2"], ["1", "0"],
                       "it 's a charming and often affecting journey . ", None),
    ("sst-2", "test"): (["test-1", "test-2"], [None, None],
                        "uneasy mishmash of styles and genres .", None),
    ("qqp", "train"): (["train-133273", "train-402555", "train-360472"], ["0", "1", "0"],
                       "How is the life of a math student? Could you describe your own "
                       "experiences?", "Which level of prepration is enough for the exam "
                       "jlpt5?"),
    ("qqp", "dev"): (["dev-201359", "dev-263843"], ["0", "0"],
                     "Why are African-Americans so beautiful?",
                     "Why are hispanics so beautiful?"),
    ("qqp", "test"): (["test-0", "test-1"], [None, None],
                      "Would the idea of Trump and Putin in bed together scare you, given the "
                      "geopolitical implications?", "Do you think that if Donald Trump were "
                      "elected President, he would be able to restore relations with Putin "
                      "and Russia as he said he could, based on the rocky relationship Putin "
                      "had with Obama and Bush?"),
    ("qnli", "train"): (["train-0", "train-1"], ["not_entailment", "not_entailment"],
                        "When did the third Digimon series begin?",
                        "Unlike the two seasons before it and most of the seasons that "
                        "followed, Digimon Tamers takes a darker and more realistic approach "
                        "to its story featuring Digimon who do not reincarnate after their "
                        "deaths and more complex character development in the original "
                        "Japanese."),
    ("qnli", "dev"): (["dev-0", "dev-1"], ["entailment", "not_entailment"],
                      "What came into force after the new constitution was herald?",
                      "As of that day, the new constitution heralding the Second Republic "
                      "came into force."),
    ("qnli", "test"): (["test-0", "test-1"], [None, None],
                       "What organization is devoted to Jihad against Israel?",
                       "For some decades prior to the First Palestine Intifada in 1987, the "
                       "Muslim Brotherhood in Palestine took a \"quiescent\" stance towards "
                       "Israel."),
    ("rte", "train"): (["train-0", "train-1"], ["not_entailment", "entailment"],
                       "No Weapons of Mass Destruction Found in Iraq Yet.",
                       "Weapons of Mass Destruction Found in Iraq."),
    ("rte", "dev"): (["dev-0", "dev-1"], ["not_entailment", "entailment"],
                     "Dana Reeve, the widow of the actor Christopher Reeve, has died of lung "
                     "cancer at age 44, according to the Christopher Reeve Foundation.",
                     "Christopher Reeve had an accident."),
    ("rte", "test"): (["test-0", "test-1"], [None, None],
                      "Mangla was summoned after Madhumita's sister Nidhi Shukla, who was the "
                      "first witness in the case, did not appear.",
                      "Shukla is related to Mangla."),
    ("sts-b", "train"): (["train-0", "train-1", "train-2"], [5.0, 3.8, 2.4],
                         "A plane is taking off.", "An air plane is taking off."),
    ("sts-b", "dev"): (["dev-0", "dev-1"], [5.0, 4.75],
                       "A man with a hard hat is dancing.",
                       "A man wearing a hard hat is dancing."),
    ("sts-b", "test"): (["test-0", "test-1"], [None, None],
                        "A girl is styling her hair.", "A girl is brushing her hair."),
}


@pytest.mark.parametrize("task_name, split", sorted(EXPECTED))
def test_every_split_reads_the_references_columns_guids_and_labels(folders, task_name,
                                                                   split):
    guids, labels, text_a, text_b = EXPECTED[task_name, split]
    examples = read_examples(get_task(task_name), folders[task_name], split)
    assert [e.guid for e in examples] == guids
    assert [e.label for e in examples] == labels
    assert examples[0] == InputExample(guids[0], text_a, text_b, labels[0])
    single = task_name in ("cola", "sst-2")
    assert all((e.text_b is None) == single for e in examples)
    assert all(type(e.label) is float for e in examples if task_name == "sts-b"
               and split != "test")


def test_texts_keep_quotes_and_unicode_as_in_the_file(folders):
    cola = read_examples(get_task("cola"), folders["cola"], "train")
    assert cola[2].text_a == "Zoë said \"it's raining."
    mnli = read_examples(get_task("mnli"), folders["mnli"], "test")
    assert mnli[1].text_b == ("Re-structuring the individual account program \"would affect "
                              "a lot.")
    qqp = read_examples(get_task("qqp"), folders["qqp"], "dev")
    assert qqp[1].text_a == ("I want to pursue PhD in Computer Science about \"social "
                             "network,what is the open problem in social networks?")
    sts = read_examples(get_task("sts-b"), folders["sts-b"], "train")
    assert sts[2].text_a == "\"Obama signs\" debt deal"


def test_xnli_reads_the_language_asked_for(folders):
    xnli = get_task("xnli")
    train = read_examples(xnli, folders["xnli"], "train", language="de")
    assert train == [InputExample(
        "train-1", "Konzeptionell cremig hat zwei grundlegende Dimensionen - Produkt und "
        "Geographie .", "Produkt und Geographie sind das , was Creme abschöpfen lässt .",
        "neutral")]
    dev = read_examples(xnli, folders["xnli"], "dev", language="en")
    assert [(e.guid, e.text_b, e.label) for e in dev] == [
        ("dev-1", "He didn't say a word.", "neutral")]
    test = read_examples(xnli, folders["xnli"], "test", language="en")
    assert [(e.guid, e.label) for e in test] == [("test-2", None)]
    assert glue.task_file(xnli, "/d", "train", language="de") == (
        "/d/multinli/multinli.train.de.tsv")
    assert glue.task_file(xnli, "/d", "dev") == "/d/xnli.dev.tsv"


def test_xnli_maps_contradictory_in_train_only_as_the_reference(tmp_path):
    header = FILES["xnli"]["xnli.dev.tsv"][0]
    row = list(FILES["xnli"]["xnli.dev.tsv"][2])
    row[1] = "contradictory"
    path = write_tsv(str(tmp_path / "xnli.dev.tsv"), [header, row])
    with pytest.raises(ValueError, match=(
            f"^{re.escape(path)}:2: label 'contradictory' is not one of xnli's labels "
            f"'contradiction', 'entailment', 'neutral'$")):
        read_examples(get_task("xnli"), str(tmp_path), "dev")


def test_bad_language_and_split(folders):
    with pytest.raises(ValueError, match="XNLI language 'xx' is not one of ar, bg, de, el, "
                                         "en, es, fr, hi, ru, sw, th, tr, ur, vi, zh"):
        read_examples(get_task("xnli"), folders["xnli"], "dev", language="xx")
    with pytest.raises(ValueError, match=r"a language \('de'\) is for XNLI only, not mnli"):
        read_examples(get_task("mnli"), folders["mnli"], "dev", language="de")
    with pytest.raises(ValueError, match="split 'validation' is not one of train, dev, test"):
        read_examples(get_task("rte"), folders["rte"], "validation")


def test_qqp_skips_rows_with_a_missing_field_or_an_empty_question(tmp_path, caplog):
    rows = [FILES["qqp"]["train.tsv"][0],
            ["1", "11", "12", "Is it?", "Is it so?", "1"],
            ["\"", "Was Muhammad a real historical figure?", "0"],
            ["3", "31", "32", "What is this?", " ", "0"],
            ["4", "41", "42", "Why?", "Why not?", "0"]]
    path = write_tsv(str(tmp_path / "train.tsv"), rows)
    with caplog.at_level("WARNING"):
        examples = read_examples(get_task("qqp"), str(tmp_path), "train")
    assert [e.guid for e in examples] == ["train-1", "train-4"]
    assert f"{path}: skipped 2 malformed rows" in caplog.text
    assert "lines 3, 4" in caplog.text


def test_qqp_test_set_keeps_every_row_or_fails(tmp_path):
    # The submission's index is the row's: a skipped test row would shift the
    # predictions of every row after it.
    rows = [["id", "question1", "question2"], ["0", "Is it?", "Is it so?"],
            ["1", "Was Muhammad a real historical figure?"], ["2", "Why?", "Why not?"]]
    path = write_tsv(str(tmp_path / "test.tsv"), rows)
    with pytest.raises(ValueError, match=f"^{path}:3: 2 columns, expected 3 as the "
                                         f"header \\(qqp test set\\)$"):
        read_examples(get_task("qqp"), str(tmp_path), "test")


def _write_task(tmp_path, task_name, file_name, rows):
    return write_tsv(str(tmp_path / file_name), rows)


@pytest.mark.parametrize("task_name, split, file_name, rows, message", [
    ("mrpc", "train", "train.tsv",
     [["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
      ["1", "1", "2", "A .", "B ."],
      ["0", "3", "4", "C ."]],
     ":3: 4 columns, expected 5 as the header (mrpc train set)"),
    ("cola", "train", "train.tsv",
     [["gj04", "1", "", "Fine ."], ["gj04", "1", "Fine too ."]],
     ":2: 3 columns, expected 4 (cola train set)"),
    ("cola", "dev", "dev.tsv",
     [["gj04", "1", "", "Fine ."], []],
     ":2: 0 columns, expected 4 (cola dev set)"),
    ("rte", "dev", "dev.tsv",
     [["index", "sentence1", "sentence2", "label"],
      ["0", "A man sleeps.", "  ", "entailment"]],
     ":2: empty text in column 3 (rte dev set)"),
    ("sst-2", "test", "test.tsv",
     [["index", "sentence"], ["0", "good ."], ["1", ""]],
     ":3: empty text in column 2 (sst-2 test set)"),
    ("qnli", "train", "train.tsv",
     [["index", "question", "sentence", "label"],
      ["0", "Who?", "Him.", "entailment"],
      ["1", "Who?", "Her.", "neutral"]],
     ":3: label 'neutral' is not one of qnli's labels 'entailment', 'not_entailment'"),
    ("mrpc", "dev", "dev.tsv",
     [["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
      ["1.0", "1", "2", "A .", "B ."]],
     ":2: label '1.0' is not one of mrpc's labels '0', '1'"),
    ("sts-b", "dev", "dev.tsv",
     [FILES["sts-b"]["dev.tsv"][0], FILES["sts-b"]["dev.tsv"][1][:9] + ["high"]],
     ":2: sts-b score 'high' is not a number"),
    ("sts-b", "train", "train.tsv",
     [FILES["sts-b"]["dev.tsv"][0], FILES["sts-b"]["dev.tsv"][1][:9] + ["nan"]],
     ":2: sts-b score 'nan' is not finite"),
    ("sts-b", "train", "train.tsv",
     [FILES["sts-b"]["dev.tsv"][0], FILES["sts-b"]["dev.tsv"][1][:9] + ["5.5"]],
     ":2: sts-b score 5.5 is outside [0, 5]"),
    ("mnli", "train", "train.tsv",
     [FILES["mnli"]["train.tsv"][0][:9], FILES["mnli"]["train.tsv"][1][:9]],
     ":1: the header has 9 columns, mnli's train file has at least 10"),
    ("rte", "train", "train.tsv", [], ": empty file (rte train set)"),
])
def test_a_bad_row_names_the_file_and_line(tmp_path, task_name, split, file_name, rows,
                                           message):
    path = _write_task(tmp_path, task_name, file_name, rows)
    with pytest.raises(ValueError) as error:
        read_examples(get_task(task_name), str(tmp_path), split)
    assert str(error.value) == path + message


def test_a_missing_file_names_the_path_and_the_task(tmp_path):
    path = os.path.join(str(tmp_path), "dev_matched.tsv")
    with pytest.raises(ValueError, match=(f"^{re.escape(path)}: no such file \\(the mnli dev set, "
                                          f"dev_matched.tsv in {re.escape(str(tmp_path))}\\)$")):
        read_examples(get_task("mnli"), str(tmp_path), "dev")


def test_windows_line_ends_read_the_same(tmp_path):
    rows = FILES["mrpc"]["dev.tsv"]
    (tmp_path / "dev.tsv").write_bytes("".join("\t".join(row) + "\r\n" for row in rows)
                                      .encode("utf-8"))
    examples = read_examples(get_task("mrpc"), str(tmp_path), "dev")
    assert [e.label for e in examples] == ["1", "0"]
    assert examples[1].text_b.endswith("in the war .")


def test_a_file_that_is_not_utf8_names_the_line(tmp_path):
    rows = FILES["mrpc"]["dev.tsv"]
    text = "".join("\t".join(row) + "\n" for row in rows).encode("utf-8")
    lines = text.split(b"\n")
    lines[2] = lines[2].replace(b"in the war", b"in the caf\xe9 war")  # Latin-1 bytes
    (tmp_path / "dev.tsv").write_bytes(b"\n".join(lines))
    path = re.escape(str(tmp_path / "dev.tsv"))
    with pytest.raises(ValueError, match=rf"^{path}:3: not UTF-8 text \(invalid "
                                         rf"continuation byte at byte \d+\)$"):
        read_examples(get_task("mrpc"), str(tmp_path), "dev")


@pytest.mark.parametrize("name, canonical", [
    ("CoLA", "cola"), ("MNLI", "mnli"), ("mrpc", "mrpc"), ("XNLI", "xnli"),
    ("SST-2", "sst-2"), ("sst2", "sst-2"), ("sst_2", "sst-2"), ("QQP", "qqp"),
    ("qnli", "qnli"), ("RTE", "rte"), ("STS-B", "sts-b"), ("stsb", "sts-b"),
    (" sts_b ", "sts-b")])
def test_get_task_accepts_case_and_hyphen_variants(name, canonical):
    assert get_task(name) is glue.TASKS[canonical]


def test_get_task_lists_the_known_names_for_an_unknown_one():
    with pytest.raises(ValueError) as error:
        get_task("wnli")
    assert str(error.value) == ("unknown --task_name=wnli; known tasks: cola, mnli, mrpc, "
                                "xnli, sst-2, qqp, qnli, rte, sts-b")


def test_task_definitions():
    summary = {name: (t.labels, t.metric_names, t.is_regression, t.num_labels)
               for name, t in glue.TASKS.items()}
    nli = ("contradiction", "entailment", "neutral")
    assert summary == {
        "cola": (("0", "1"), ("matthews_corrcoef",), False, 2),
        "mnli": (nli, ("accuracy",), False, 3),
        "mrpc": (("0", "1"), ("accuracy", "f1"), False, 2),
        "xnli": (nli, ("accuracy",), False, 3),
        "sst-2": (("0", "1"), ("accuracy",), False, 2),
        "qqp": (("0", "1"), ("accuracy", "f1"), False, 2),
        "qnli": (("entailment", "not_entailment"), ("accuracy",), False, 2),
        "rte": (("entailment", "not_entailment"), ("accuracy",), False, 2),
        "sts-b": ((), ("pearson", "spearman"), True, 1),
    }


def test_label_ids_and_names():
    mnli, sts = get_task("mnli"), get_task("sts-b")
    assert [mnli.label_id(label) for label in ("neutral", "contradiction")] == [2, 0]
    assert mnli.label_name(np.int64(1)) == "entailment"
    assert mnli.label_name(2) == "neutral"
    assert sts.label_id("3.800") == 3.8
    assert sts.label_name(np.float32(3.14159)) == "3.142"
    assert sts.label_name(-0.0004) == "0.000"
    assert sts.label_name(-0.0006) == "-0.001"
    with pytest.raises(ValueError, match="label 'Neutral' is not one of mnli's labels "
                                         "'contradiction', 'entailment', 'neutral'"):
        mnli.label_id("Neutral")
    with pytest.raises(ValueError, match=r"mnli prediction 3 is not a label id in \[0, 3\)"):
        mnli.label_name(3)
    with pytest.raises(ValueError, match="mnli prediction 1.0 is not an integer label id"):
        mnli.label_name(1.0)
    with pytest.raises(ValueError, match="mnli prediction True is not an integer label id"):
        mnli.label_name(True)
    with pytest.raises(ValueError, match="sts-b prediction 'x' is not a number"):
        sts.label_name("x")
    with pytest.raises(ValueError, match="a regression task has no labels"):
        glue.GlueTask("bad", ("0",), ("pearson",), True)


def test_glue_and_metrics_never_import_tensorflow():
    code = ("import sys, packed_bert_tf.classification.glue, "
            "packed_bert_tf.classification.metrics; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'keras')))")
    # A fresh interpreter: the claim is what a process that imports them alone
    # has loaded.
    result = run_tool("-c", code, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
