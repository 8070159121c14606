"""Small GLUE- and XNLI-format TSV files for tests, in GLUE's folder layout.

`write_glue_files(root)` writes every task's train/dev/test files under
``root/<folder>`` (``CoLA``, ``MNLI``, ... as ``glue_data`` has them; XNLI as
google-research/bert reads it: ``xnli.dev.tsv``, ``xnli.test.tsv`` and
``multinli/multinli.train.<lang>.tsv``) and returns ``{task name: folder}``.
The rows copy the real files' shapes: the same headers and column counts,
unbalanced quotes (MNLI, QQP, MRPC), non-ASCII text, SST-2's trailing space,
an empty column in CoLA, and in QQP ``train.tsv`` one row with a missing
field, as GLUE's real file has (``read_examples`` skips it; 3 examples
remain). Tabs appear only as separators.

Examples per split (train, dev, test): cola 3 2 2, mnli 2 2 2, mrpc 3 2 2,
xnli (zh) 3 2 2, sst-2 3 2 2, qqp 3 2 2, qnli 2 2 2, rte 2 2 2, sts-b 3 2 2.
"""

from __future__ import annotations

import os

FOLDERS = {"cola": "CoLA", "mnli": "MNLI", "mrpc": "MRPC", "xnli": "XNLI", "sst-2": "SST-2",
           "qqp": "QQP", "qnli": "QNLI", "rte": "RTE", "sts-b": "STS-B"}

_MNLI_TRAIN_HEADER = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                      "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
                      "sentence1", "sentence2", "label1", "gold_label"]
_MNLI_DEV_HEADER = _MNLI_TRAIN_HEADER[:11] + ["label2", "label3", "label4", "label5",
                                              "gold_label"]
_MNLI_TEST_HEADER = _MNLI_TRAIN_HEADER[:10]
_XNLI_HEADER = ["language", "gold_label", "sentence1_binary_parse", "sentence2_binary_parse",
                "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "promptID",
                "pairID", "genre", "label1", "label2", "label3", "label4", "label5",
                "sentence1_tokenized", "sentence2_tokenized", "match"]
_STSB_HEADER = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
                "sentence1", "sentence2", "score"]


def _parse(text: str) -> str:
    return "( " + " ".join(text.split()) + " )"


def _mnli(index, prompt, genre, premise, hypothesis, labels):
    pair = f"{prompt}{'enc'[index % 3]}"
    return ([str(index), str(prompt), pair, genre, _parse(premise), _parse(hypothesis),
             "(ROOT " + _parse(premise) + ")", "(ROOT " + _parse(hypothesis) + ")",
             premise, hypothesis] + labels)


def _xnli(language, gold, premise, hypothesis, pair):
    return [language, gold, "", "", "", "", premise, hypothesis, str(pair // 3),
            str(pair), "facetoface", gold, gold, "neutral", gold, gold,
            " ".join(premise), " ".join(hypothesis), "True"]


# FILES[task][path relative to the task's folder] = rows (lists of columns).
FILES: dict[str, dict[str, list[list[str]]]] = {
    "cola": {
        "train.tsv": [
            ["gj04", "1", "", "Our friends won't buy this analysis, let alone the next "
                              "one we propose."],
            ["gj04", "0", "*", "They drank the pub."],
            ["clc95", "1", "", "Zoë said \"it's raining."],
        ],
        "dev.tsv": [
            ["gj04", "1", "", "The sailors rode the breeze clear of the rocks."],
            ["bc01", "0", "*", "Who do you think that left?"],
        ],
        "test.tsv": [
            ["index", "sentence"],
            ["0", "Bill whistled past the house."],
            ["1", "The car honked its way down the road — \"fast\"."],
        ],
    },
    "mnli": {
        "train.tsv": [
            _MNLI_TRAIN_HEADER,
            _mnli(0, 31193, "government",
                  "Conceptually cream skimming has two basic dimensions - product and "
                  "geography.", "Product and geography are what make cream skimming work. ",
                  ["neutral", "neutral"]),
            _mnli(1, 101457, "telephone",
                  "you know during the season and i guess at at your level uh you lose "
                  "them to the next level if \"if they decide to recall the the parent team",
                  "You lose the things to the following level if the people recall.",
                  ["entailment", "entailment"]),
        ],
        "dev_matched.tsv": [
            _MNLI_DEV_HEADER,
            _mnli(0, 63735, "slate", "The new rights are nice enough",
                  "Everyone really likes the newest benefits ",
                  ["neutral", "entailment", "neutral", "neutral", "neutral", "neutral"]),
            _mnli(1, 91383, "government",
                  "This site includes a list of all award winners and a searchable "
                  "database of Government Executive articles.",
                  "The Government Executive articles housed on the website are not able "
                  "to be searched.",
                  ["contradiction"] * 6),
        ],
        "test_matched.tsv": [
            _MNLI_TEST_HEADER,
            _mnli(0, 31, "government", "Hierbas, ans seco, ans dulce, and frigola are "
                  "just a few names worth keeping a look-out for.",
                  "Hierbas is a name worth looking out for.", []),
            _mnli(1, 47, "fiction", "The extent of the behavioral effects would depend "
                  "in part on the structure of the individual account program.",
                  "Re-structuring the individual account program \"would affect a lot.", []),
        ],
    },
    "mrpc": {
        "train.tsv": [
            ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
            ["1", "702876", "702977", "Amrozi accused his brother , whom he called \" the "
             "witness \" , of deliberately distorting his evidence .", "Referring to him as "
             "only \" the witness \" , Amrozi accused his brother of deliberately "
             "distorting his evidence ."],
            ["0", "2108705", "2108831", "Yucaipa owned Dominick 's before selling the chain "
             "to Safeway in 1998 for $ 2.5 billion .", "Yucaipa bought Dominick 's in 1995 "
             "for $ 693 million and sold it to Safeway for $ 1.8 billion in 1998 ."],
            ["1", "1330381", "1330521", "They had published an advertisement on the Internet "
             "on June 10 , offering the cargo for sale , he added .", "On June 10 , the "
             "ship 's owners had published an advertisement on the Internet , offering the "
             "explosives for sale ."],
        ],
        "dev.tsv": [
            ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
            ["1", "1355540", "1355592", "He said the foodservice pie business doesn 't fit "
             "the company 's long-term growth strategy .", "\" The foodservice pie business "
             "does not fit our long-term growth strategy ."],
            ["0", "2029631", "2029565", "Magnarelli said Racicot hated the Iraqi regime and "
             "looked forward to using his long years of training in the war .", "His wife "
             "said he was \" 100 percent behind George Bush \" and looked forward to using "
             "his years of training in the war ."],
        ],
        "test.tsv": [
            ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
            ["0", "1089874", "1089925", "PCCW 's chief operating officer , Mike Butcher , "
             "and Alex Arena , the chief financial officer , will report directly to Mr So "
             ".", "Current Chief Operating Officer Mike Butcher and Group Chief Financial "
             "Officer Alex Arena will report to So ."],
            ["1", "3019446", "3019327", "The world 's two largest automakers said their "
             "U.S. sales declined more than predicted last month as a late summer sales "
             "frenzy caused more of an industry backlash than expected .", "Domestic sales "
             "at both GM and No. 2 Ford Motor Co. declined more than predicted as a late "
             "summer sales frenzy prompted a larger-than-expected industry backlash ."],
        ],
    },
    "xnli": {
        os.path.join("multinli", "multinli.train.zh.tsv"): [
            ["premise", "hypo", "label"],
            ["从 概念 上 看 , 奶油 收入 有 两 个 基本 方面 产品 和 地理 .",
             "产品 和 地理 是 什么 使 奶油 抹 霜 工作 .", "neutral"],
            ["你 知道 在 这个 季节 , 我 猜 在 你 的 水平 你 把 他们 丢到 下 一个 水平",
             "如果 人们 记得 的 话 , 你 就 会 把 事情 弄 丢 了 .", "entailment"],
            ["我们 的 一个 号码 会 非常 详细 地 执行 你 的 指示",
             "我 团队 的 一个 成员 将 非常 精确 地 执行 你 的 命令", "contradictory"],
        ],
        os.path.join("multinli", "multinli.train.de.tsv"): [
            ["premise", "hypo", "label"],
            ["Konzeptionell cremig hat zwei grundlegende Dimensionen - Produkt und "
             "Geographie .", "Produkt und Geographie sind das , was Creme abschöpfen "
             "lässt .", "neutral"],
        ],
        "xnli.dev.tsv": [
            _XNLI_HEADER,
            _xnli("en", "neutral", "And he said, Mama, I'm home.",
                  "He didn't say a word.", 1),
            _xnli("zh", "contradiction", "他说，妈妈，我回来了。", "他一句话也没说。", 1),
            _xnli("de", "entailment", "und er hat gesagt, Mama ich bin daheim.",
                  "Er sagte seiner Mutter, er sei nach Hause gekommen.", 2),
            _xnli("zh", "entailment", "他说，妈妈，我回来了。", "他告诉他的妈妈他回家了。", 2),
        ],
        "xnli.test.tsv": [
            _XNLI_HEADER,
            _xnli("zh", "contradiction", "嗯，我根本没想过，但是我很沮丧，最后我又和他说话了。",
                  "我没有和他再说话。", 1),
            _xnli("en", "neutral", "Well, I wasn't even thinking about that.",
                  "I was so upset.", 2),
            _xnli("zh", "neutral", "嗯，我根本没想过，但是我很沮丧，最后我又和他说话了。",
                  "我很沮丧，所以我又开始和他说话了。", 2),
        ],
    },
    "sst-2": {
        "train.tsv": [
            ["sentence", "label"],
            ["hide new secretions from the parental units ", "0"],
            ["contains no wit , only labored gags ", "0"],
            ["that loves its characters and communicates something rather beautiful about "
             "human nature ", "1"],
        ],
        "dev.tsv": [
            ["sentence", "label"],
            ["it 's a charming and often affecting journey . ", "1"],
            ["unflinchingly bleak and desperate ", "0"],
        ],
        "test.tsv": [
            ["index", "sentence"],
            ["0", "uneasy mishmash of styles and genres ."],
            ["1", "this film 's relationship to actual tension is the same as what "
                  "christmas-tree flocking in a spray can is to actual snow : a poor -- if "
                  "durable -- imitation ."],
        ],
    },
    "qqp": {
        "train.tsv": [
            ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
            ["133273", "213221", "213222", "How is the life of a math student? Could you "
             "describe your own experiences?", "Which level of prepration is enough for the "
             "exam jlpt5?", "0"],
            ["402555", "536040", "536041", "How do I control my horny emotions?",
             "How do you control your horniness?", "1"],
            # GLUE's real train.tsv has such rows (nyu-mll/GLUE-baselines#5).
            ["\"", "Was Muhammad a real historical figure? What is the evidence for his "
             "existence?", "0"],
            ["360472", "364011", "490273", "What causes stool color to change to yellow?",
             "What can cause stool to come out as little balls?", "0"],
        ],
        "dev.tsv": [
            ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
            ["201359", "303345", "303346", "Why are African-Americans so beautiful?",
             "Why are hispanics so beautiful?", "0"],
            ["263843", "69383", "380476", "I want to pursue PhD in Computer Science about "
             "\"social network,what is the open problem in social networks?",
             "I handle social media for a non-profit. Should I start going to social media "
             "networking events? Are there any good ones in the bay area?", "0"],
        ],
        "test.tsv": [
            ["id", "question1", "question2"],
            ["0", "Would the idea of Trump and Putin in bed together scare you, given the "
                  "geopolitical implications?", "Do you think that if Donald Trump were "
                  "elected President, he would be able to restore relations with Putin and "
                  "Russia as he said he could, based on the rocky relationship Putin had "
                  "with Obama and Bush?"],
            ["1", "What are the top ten Consumer-to-Consumer E-commerce online?",
             "What are the top ten Consumer-to-Business E-commerce online?"],
        ],
    },
    "qnli": {
        "train.tsv": [
            ["index", "question", "sentence", "label"],
            ["0", "When did the third Digimon series begin?", "Unlike the two seasons "
             "before it and most of the seasons that followed, Digimon Tamers takes a darker "
             "and more realistic approach to its story featuring Digimon who do not "
             "reincarnate after their deaths and more complex character development in the "
             "original Japanese.", "not_entailment"],
            ["1", "Which missile batteries often have individual launchers several "
             "kilometres from one another?", "When MANPADS is operated by specialists, "
             "batteries may have several dozen teams deploying separately in small "
             "sections; self-propelled air defence guns may deploy in pairs.",
             "not_entailment"],
        ],
        "dev.tsv": [
            ["index", "question", "sentence", "label"],
            ["0", "What came into force after the new constitution was herald?", "As of "
             "that day, the new constitution heralding the Second Republic came into "
             "force.", "entailment"],
            ["1", "What is the first major city in the stream of the Rhine?", "The "
             "most important tributaries in this area are the Ill below of Strasbourg, the "
             "Neckar in Mannheim and the Main across from Mainz.", "not_entailment"],
        ],
        "test.tsv": [
            ["index", "question", "sentence"],
            ["0", "What organization is devoted to Jihad against Israel?", "For some "
             "decades prior to the First Palestine Intifada in 1987, the Muslim Brotherhood "
             "in Palestine took a \"quiescent\" stance towards Israel."],
            ["1", "In what century was the Yarrow-Schlick-Tweedy balancing system used?",
             "In the late 19th century, the Yarrow-Schlick-Tweedy balancing 'system' was "
             "used on some marine triple expansion engines."],
        ],
    },
    "rte": {
        "train.tsv": [
            ["index", "sentence1", "sentence2", "label"],
            ["0", "No Weapons of Mass Destruction Found in Iraq Yet.", "Weapons of Mass "
             "Destruction Found in Iraq.", "not_entailment"],
            ["1", "A place of sorrow, after Pope John Paul II died, became a place of "
             "celebration, as Roman Catholic faithful gathered in downtown Chicago to mark "
             "the installation of new Pope Benedict XVI.", "Pope Benedict XVI is the new "
             "leader of the Roman Catholic Church.", "entailment"],
        ],
        "dev.tsv": [
            ["index", "sentence1", "sentence2", "label"],
            ["0", "Dana Reeve, the widow of the actor Christopher Reeve, has died of lung "
             "cancer at age 44, according to the Christopher Reeve Foundation.",
             "Christopher Reeve had an accident.", "not_entailment"],
            ["1", "Yet, we now are discovering that antibiotics are losing their "
             "effectiveness against illness.", "Bacteria is winning the war against "
             "antibiotics.", "entailment"],
        ],
        "test.tsv": [
            ["index", "sentence1", "sentence2"],
            ["0", "Mangla was summoned after Madhumita's sister Nidhi Shukla, who was the "
             "first witness in the case, did not appear.", "Shukla is related to "
             "Mangla."],
            ["1", "Authorities in Brazil say that more than 200 people are being held "
             "hostage in a prison in the country's remote, Amazonian-jungle state of "
             "Rondônia.", "Authorities in Brazil hold 200 people as hostage."],
        ],
    },
    "sts-b": {
        "train.tsv": [
            _STSB_HEADER,
            ["0", "main-captions", "MSRvid", "2012test", "0001", "none", "none",
             "A plane is taking off.", "An air plane is taking off.", "5.000"],
            ["1", "main-captions", "MSRvid", "2012test", "0004", "none", "none",
             "A man is playing a large flute.", "A man is playing a flute.", "3.800"],
            ["2", "main-news", "headlines", "2013", "0011", "none", "none",
             "\"Obama signs\" debt deal", "Obama signs the debt ceiling bill", "2.4"],
        ],
        "dev.tsv": [
            _STSB_HEADER,
            ["0", "main-captions", "MSRvid", "2012test", "0000", "none", "none",
             "A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.",
             "5.000"],
            ["1", "main-captions", "MSRvid", "2012test", "0002", "none", "none",
             "A young child is riding a horse.", "A child is riding a horse.", "4.750"],
        ],
        "test.tsv": [
            _STSB_HEADER[:9],
            ["0", "main-captions", "MSRvid", "2012test", "0024", "none", "none",
             "A girl is styling her hair.", "A girl is brushing her hair."],
            ["1", "main-captions", "MSRvid", "2012test", "0033", "none", "none",
             "A group of men play soccer on the beach.",
             "A group of boys are playing soccer on the beach."],
        ],
    },
}


def write_tsv(path: str, rows: list[list[str]]) -> str:
    """Writes rows as GLUE does: columns joined by tabs, one line each, no
    quoting; creates the folder. Returns ``path``."""
    for row in rows:
        for column in row:
            if "\t" in column or "\n" in column:
                raise ValueError(f"a column holds a tab or a newline: {column!r}")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.writelines("\t".join(row) + "\n" for row in rows)
    return path


def write_glue_files(root: str, tasks=None) -> dict[str, str]:
    """Writes `FILES` for ``tasks`` (default all) under ``root``.

    Returns:
      ``{task name: the data_dir to give read_examples}``.
    """
    folders = {}
    for task in tasks or FILES:
        folder = os.path.join(root, FOLDERS[task])
        for relative, rows in FILES[task].items():
            write_tsv(os.path.join(folder, relative), rows)
        folders[task] = folder
    return folders
