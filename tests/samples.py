"""Sample data in the official formats, shared by several test modules: abridged GLUE TSV files,
a SQuAD 2.0 JSON document and WikiText raw files."""

from __future__ import annotations

import gzip

# Official GLUE TSV files, abridged to a couple of lines each: {task dir: {file: lines}}. MRPC's
# train/dev start with a UTF-8 byte-order mark, as the files of the official download do.
GLUE_FILES = {
    "CoLA": {
        "train.tsv": ["gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.",
                      "gj04\t0\t*\tThey drank the pub."],
        "dev.tsv": ["gj04\t1\t\tThe sailors rode the breeze clear of the rocks."],
        "test.tsv": ["index\tsentence", "0\tBill whistled past the house."],
    },
    "SST-2": {
        "train.tsv": ["sentence\tlabel", "hide new secretions from the parental units \t0",
                      "contains no wit , only labored gags \t0"],
        "dev.tsv": ["sentence\tlabel", "it 's a charming and often affecting journey . \t1"],
        "test.tsv": ["index\tsentence", "0\tuneasy mishmash of styles and genres ."],
    },
    "MRPC": {
        "train.tsv": ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String",
                      '1\t702876\t702977\tAmrozi accused his brother , whom he called " the witness " , of '
                      'deliberately distorting his evidence .\tReferring to him as only " the witness " , Amrozi '
                      'accused his brother of deliberately distorting his evidence .'],
        "dev.tsv": ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String",
                    "0\t1355540\t1355592\tHe said the foodservice pie business doesn 't fit the company 's long-term "
                    "growth strategy .\tThe foodservice pie business does not fit our long-term growth strategy ."],
        "test.tsv": ["index\t#1 ID\t#2 ID\t#1 String\t#2 String",
                     "0\t1089874\t1089925\tPCCW 's chief operating officer , Mike Butcher , and Alex Arena , the chief "
                     "financial officer , will report directly to Mr So .\tCurrent Chief Operating Officer Mike "
                     "Butcher and Group Chief Financial Officer Alex Arena will report to So ."],
    },
    "QQP": {
        "train.tsv": ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                      "133273\t213221\t213222\tHow is the life of a math student? Could you describe your own "
                      "experiences?\tWhich level of prepration is enough for the exam jlpt5?\t0",
                      "broken line without enough fields"],
        "dev.tsv": ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                    '201359\t303345\t303346\tWhy are African-Americans so beautiful?\tWhy are hispanics so beautiful?\t'
                    '0'],
        "test.tsv": ["id\tquestion1\tquestion2",
                     "0\tWhy am I mentally very lonely? How can I solve it?\tFind the remainder when "
                     "[math]23^{24}[/math] is divided by 24,23?"],
    },
    "STS-B": {
        "train.tsv": ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
                      "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\tAn air plane is "
                      "taking off.\t5.000"],
        "dev.tsv": ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
                    "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man with a hard hat is dancing.\tA man "
                    "wearing a hard hat is dancing.\t5.000",
                    "1\tmain-captions\tMSRvid\t2012test\t0002\tnone\tnone\tA young child is riding a horse.\tA child "
                    "is riding a horse.\t4.750"],
        "test.tsv": ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2",
                     "0\tmain-captions\tMSRvid\t2012test\t0024\tnone\tnone\tA girl is styling her hair.\tA girl is "
                     "brushing her hair."],
    },
    "MNLI": {
        "train.tsv": ["index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                      "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label",
                      "0\t31193\t31193n\tgovernment\t( ( Conceptually ...\t( Product ...\t(ROOT ...)\t(ROOT ...)\t"
                      "Conceptually cream skimming has two basic dimensions - product and geography.\tProduct and "
                      "geography are what make cream skimming work. \tneutral\tneutral"],
        "dev_matched.tsv": ["index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                            "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\t"
                            "label5\tgold_label",
                            "0\t63735\t63735n\tslate\t( ... )\t( ... )\t(ROOT ...)\t(ROOT ...)\tThe new rights are "
                            "nice enough\tEveryone really likes the newest benefits \tneutral\tentailment\tneutral\t"
                            "neutral\tneutral\tneutral"],
        "dev_mismatched.tsv": ["index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                               "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\t"
                               "label4\tlabel5\tgold_label",
                               '0\t75290\t75290c\tletters\t( ... )\t( ... )\t(ROOT ...)\t(ROOT ...)\tYour contribution '
                               'helped make it possible for us to provide our students with a quality education.\tYour '
                               'contributions were of no help with our students\' education.\tcontradiction\t'
                               'contradiction\tcontradiction\tcontradiction\tcontradiction\tcontradiction'],
        "test_matched.tsv": ["index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                             "sentence1_parse\tsentence2_parse\tsentence1\tsentence2",
                             "0\t31493\t31493\ttravel\t( ... )\t( ... )\t(ROOT ...)\t(ROOT ...)\tHierbas, ans seco, "
                             "ans dulce, and frigola are just a few names worth keeping a look-out for.\tHierbas is a "
                             "name worth looking out for."],
        "test_mismatched.tsv": ["index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                                "sentence1_parse\tsentence2_parse\tsentence1\tsentence2",
                                "0\t16130\t16130\tfacetoface\t( ... )\t( ... )\t(ROOT ...)\t(ROOT ...)\tWhat have you "
                                "decided, what are you going to do?\tSo what's your decision?"],
    },
    "QNLI": {
        "train.tsv": ["index\tquestion\tsentence\tlabel",
                      "0\tWhen did the third Digimon series begin?\tUnlike the two seasons before it and most of the "
                      "seasons that followed, Digimon Tamers takes a darker and more realistic approach to its story "
                      "featuring Digimon who do not reincarnate after their deaths and more complex character "
                      "development in the original Japanese.\tnot_entailment"],
        "dev.tsv": ["index\tquestion\tsentence\tlabel",
                    "0\tWhat came into force after the new constitution was herald?\tAs of that day, the new "
                    "constitution heralding the Second Republic came into force.\tentailment"],
        "test.tsv": ["index\tquestion\tsentence",
                     "0\tWhat organization is devoted to Jihad against Israel?\tFor some decades prior to the First "
                     "Palestine Intifada in 1987, the Muslim Brotherhood in Palestine took a \"quiescent\" stance "
                     "towards Israel."],
    },
    "RTE": {
        "train.tsv": ["index\tsentence1\tsentence2\tlabel",
                      "0\tNo Weapons of Mass Destruction Found in Iraq Yet.\tWeapons of Mass Destruction Found in "
                      "Iraq.\tnot_entailment"],
        "dev.tsv": ["index\tsentence1\tsentence2\tlabel",
                    "0\tDana Reeve, the widow of the actor Christopher Reeve, has died of lung cancer at age 44.\t"
                    "Christopher Reeve had an accident.\tnot_entailment",
                    "1\tYet, we now are discovering that antibiotics are losing their effectiveness.\tBacteria is "
                    "winning the war against antibiotics.\tentailment"],
        "test.tsv": ["index\tsentence1\tsentence2", "0\tMaude and Dorothy are friends.\tDorothy is a friend.",
                     "1\tonly one field"],
    },
}  # fmt: skip

# The official SQuAD 2.0 JSON, abridged; q4's answer_start points elsewhere in the context.
SQUAD_CONTEXT = "Super Bowl 50 was played at Levi's Stadium in Santa Clara, California. The Denver Broncos won."
SQUAD_V2 = {
    "version": "v2.0",
    "data": [
        {
            "title": "Super_Bowl_50",
            "paragraphs": [
                {
                    "context": SQUAD_CONTEXT,
                    "qas": [
                        {
                            "question": "Who won Super Bowl 50?",
                            "id": "q1",
                            "answers": [{"text": "Denver Broncos", "answer_start": 75},
                                        {"text": "The Denver Broncos", "answer_start": 71}],
                            "is_impossible": False,
                        },
                        {
                            "question": "Where was Super Bowl 50 played?",
                            "id": "q2",
                            "answers": [{"text": "Santa Clara, California", "answer_start": 46}],
                            "is_impossible": False,
                        },
                        {
                            "plausible_answers": [{"text": "Levi's Stadium", "answer_start": 28}],
                            "question": "Where was Super Bowl 51 played?",
                            "id": "q3",
                            "answers": [],
                            "is_impossible": True,
                        },
                        {
                            "question": "Which stadium?",
                            "id": "q4",
                            "answers": [{"text": "Levi's Stadium", "answer_start": 3}],
                            "is_impossible": False,
                        },
                    ],
                }
            ],
        }
    ],
}  # fmt: skip


def write_wikitext(raw):
    """WikiText-2's raw files (train/valid/test.raw.gz): four articles, each with a section."""
    raw.mkdir(parents=True, exist_ok=True)
    for split, titles in {"train": ["A", "B"], "valid": ["C"], "test": ["D"]}.items():
        lines = []
        for t in titles:
            lines += [" ", f" = {t} = ", " ", f" the cat sat on the mat in {t} . ", " = = Section = = ",
                      " the dog ran . "]
        (raw / f"{split}.raw.gz").write_bytes(gzip.compress("\n".join(lines).encode()))
