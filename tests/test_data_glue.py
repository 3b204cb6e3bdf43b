import json

import pytest

from maskbench.data.boolq import read_boolq_jsonl, remove_overlap
from maskbench.data.glue import GLUE_TASKS, glue_hub_rows, read_glue_tsv
from maskbench.data.vader import read_vader_movie_snippets

# Official GLUE TSV files, abridged to a couple of lines each: {task dir: {file: lines}}. MRPC's
# train/dev start with a UTF-8 byte-order mark, as the files of the official download do.
GLUE_FILES = {
    "CoLA": {
        "train.tsv": ["gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.", "gj04\t0\t*\tThey drank the pub."],
        "dev.tsv": ["gj04\t1\t\tThe sailors rode the breeze clear of the rocks."],
        "test.tsv": ["index\tsentence", "0\tBill whistled past the house."],
    },
    "SST-2": {
        "train.tsv": ["sentence\tlabel", "hide new secretions from the parental units \t0", "contains no wit , only labored gags \t0"],
        "dev.tsv": ["sentence\tlabel", "it 's a charming and often affecting journey . \t1"],
        "test.tsv": ["index\tsentence", "0\tuneasy mishmash of styles and genres ."],
    },
    "MRPC": {
        "train.tsv": ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String", '1\t702876\t702977\tAmrozi accused his brother , whom he called " the witness " , of deliberately distorting his evidence .\tReferring to him as only " the witness " , Amrozi accused his brother of deliberately distorting his evidence .'],
        "dev.tsv": ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String", "0\t1355540\t1355592\tHe said the foodservice pie business doesn 't fit the company 's long-term growth strategy .\tThe foodservice pie business does not fit our long-term growth strategy ."],
        "test.tsv": ["index\t#1 ID\t#2 ID\t#1 String\t#2 String", "0\t1089874\t1089925\tPCCW 's chief operating officer , Mike Butcher , and Alex Arena , the chief financial officer , will report directly to Mr So .\tCurrent Chief Operating Officer Mike Butcher and Group Chief Financial Officer Alex Arena will report to So ."],
    },
    "QQP": {
        "train.tsv": ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "133273\t213221\t213222\tHow is the life of a math student? Could you describe your own experiences?\tWhich level of prepration is enough for the exam jlpt5?\t0", "broken line without enough fields"],
        "dev.tsv": ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", '201359\t303345\t303346\tWhy are African-Americans so beautiful?\tWhy are hispanics so beautiful?\t0'],
        "test.tsv": ["id\tquestion1\tquestion2", "0\tWhy am I mentally very lonely? How can I solve it?\tFind the remainder when [math]23^{24}[/math] is divided by 24,23?"],
    },
    "STS-B": {
        "train.tsv": ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore", "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\tAn air plane is taking off.\t5.000"],
        "dev.tsv": ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore", "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man with a hard hat is dancing.\tA man wearing a hard hat is dancing.\t5.000", "1\tmain-captions\tMSRvid\t2012test\t0002\tnone\tnone\tA young child is riding a horse.\tA child is riding a horse.\t4.750"],
        "test.tsv": ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2", "0\tmain-captions\tMSRvid\t2012test\t0024\tnone\tnone\tA girl is styling her hair.\tA girl is brushing her hair."],
    },
    "MNLI": {
        "train.tsv": ["index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label", "0\t31193\t31193n\tgovernment\t( ( Conceptually ...\t( Product ...\t(ROOT ...)\t(ROOT ...)\tConceptually cream skimming has two basic dimensions - product and geography.\tProduct and geography are what make cream skimming work. \tneutral\tneutral"],
        "dev_matched.tsv": ["index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label", "0\t63735\t63735n\tslate\t( ... )\t( ... )\t(ROOT ...)\t(ROOT ...)\tThe new rights are nice enough\tEveryone really likes the newest benefits \tneutral\tentailment\tneutral\tneutral\tneutral\tneutral"],
        "dev_mismatched.tsv": ["index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label", '0\t75290\t75290c\tletters\t( ... )\t( ... )\t(ROOT ...)\t(ROOT ...)\tYour contribution helped make it possible for us to provide our students with a quality education.\tYour contributions were of no help with our students\' education.\tcontradiction\tcontradiction\tcontradiction\tcontradiction\tcontradiction\tcontradiction'],
        "test_matched.tsv": ["index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2", "0\t31493\t31493\ttravel\t( ... )\t( ... )\t(ROOT ...)\t(ROOT ...)\tHierbas, ans seco, ans dulce, and frigola are just a few names worth keeping a look-out for.\tHierbas is a name worth looking out for."],
        "test_mismatched.tsv": ["index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2", "0\t16130\t16130\tfacetoface\t( ... )\t( ... )\t(ROOT ...)\t(ROOT ...)\tWhat have you decided, what are you going to do?\tSo what's your decision?"],
    },
    "QNLI": {
        "train.tsv": ["index\tquestion\tsentence\tlabel", "0\tWhen did the third Digimon series begin?\tUnlike the two seasons before it and most of the seasons that followed, Digimon Tamers takes a darker and more realistic approach to its story featuring Digimon who do not reincarnate after their deaths and more complex character development in the original Japanese.\tnot_entailment"],
        "dev.tsv": ["index\tquestion\tsentence\tlabel", "0\tWhat came into force after the new constitution was herald?\tAs of that day, the new constitution heralding the Second Republic came into force.\tentailment"],
        "test.tsv": ["index\tquestion\tsentence", "0\tWhat organization is devoted to Jihad against Israel?\tFor some decades prior to the First Palestine Intifada in 1987, the Muslim Brotherhood in Palestine took a \"quiescent\" stance towards Israel."],
    },
    "RTE": {
        "train.tsv": ["index\tsentence1\tsentence2\tlabel", "0\tNo Weapons of Mass Destruction Found in Iraq Yet.\tWeapons of Mass Destruction Found in Iraq.\tnot_entailment"],
        "dev.tsv": ["index\tsentence1\tsentence2\tlabel", "0\tDana Reeve, the widow of the actor Christopher Reeve, has died of lung cancer at age 44.\tChristopher Reeve had an accident.\tnot_entailment", "1\tYet, we now are discovering that antibiotics are losing their effectiveness.\tBacteria is winning the war against antibiotics.\tentailment"],
        "test.tsv": ["index\tsentence1\tsentence2", "0\tMaude and Dorothy are friends.\tDorothy is a friend.", "1\tonly one field"],
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue_data")
    for directory, files in GLUE_FILES.items():
        (root / directory).mkdir()
        for name, lines in files.items():
            (root / directory / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


EXPECTED_FIRST_ROWS = {
    ("cola", "train"): ("Our friends won't buy this analysis, let alone the next one we propose.", None, 1),
    ("cola", "test"): ("Bill whistled past the house.", None, None),
    ("sst2", "validation"): ("it 's a charming and often affecting journey .", None, 1),
    ("mrpc", "train"): ('Amrozi accused his brother , whom he called " the witness " , of deliberately distorting his evidence .', 'Referring to him as only " the witness " , Amrozi accused his brother of deliberately distorting his evidence .', 1),
    ("mrpc", "test"): ("PCCW 's chief operating officer , Mike Butcher , and Alex Arena , the chief financial officer , will report directly to Mr So .", "Current Chief Operating Officer Mike Butcher and Group Chief Financial Officer Alex Arena will report to So .", None),
    ("qqp", "test"): ("Why am I mentally very lonely? How can I solve it?", "Find the remainder when [math]23^{24}[/math] is divided by 24,23?", None),
    ("stsb", "validation"): ("A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.", 5.0),
    ("mnli", "train"): ("Conceptually cream skimming has two basic dimensions - product and geography.", "Product and geography are what make cream skimming work.", 1),
    ("mnli", "validation_matched"): ("The new rights are nice enough", "Everyone really likes the newest benefits", 1),
    ("mnli", "validation_mismatched"): ("Your contribution helped make it possible for us to provide our students with a quality education.", "Your contributions were of no help with our students' education.", 2),
    ("mnli", "test_matched"): ("Hierbas, ans seco, ans dulce, and frigola are just a few names worth keeping a look-out for.", "Hierbas is a name worth looking out for.", None),
    ("mnli", "test_mismatched"): ("What have you decided, what are you going to do?", "So what's your decision?", None),
    ("qnli", "validation"): ("What came into force after the new constitution was herald?", "As of that day, the new constitution heralding the Second Republic came into force.", 0),
    ("qnli", "test"): ("What organization is devoted to Jihad against Israel?", 'For some decades prior to the First Palestine Intifada in 1987, the Muslim Brotherhood in Palestine took a "quiescent" stance towards Israel.', None),
    ("rte", "train"): ("No Weapons of Mass Destruction Found in Iraq Yet.", "Weapons of Mass Destruction Found in Iraq.", 1),
}  # fmt: skip


@pytest.mark.parametrize("task, split", list(EXPECTED_FIRST_ROWS), ids=[f"{t}-{s}" for t, s in EXPECTED_FIRST_ROWS])
def test_official_tsv_layouts(glue_dir, task, split):
    rows, _ = read_glue_tsv(task, split, glue_dir)
    text, text_pair, label = EXPECTED_FIRST_ROWS[task, split]
    assert rows[0] == {"text": text, "text_pair": text_pair, "label": label}


def test_every_split_of_every_task_reads(glue_dir):
    for name, task in GLUE_TASKS.items():
        for split in task.split_files:
            rows, _ = read_glue_tsv(name, split, glue_dir)
            assert rows, (name, split)
            assert all((r["label"] is None) == split.startswith("test") for r in rows)


def test_malformed_lines_are_counted(glue_dir):
    assert read_glue_tsv("qqp", "train", glue_dir)[1] == {"wrong_field_count": 1}
    rows, skipped = read_glue_tsv("rte", "test", glue_dir)
    assert len(rows) == 1 and skipped == {"wrong_field_count": 1}
    assert [r["label"] for r in read_glue_tsv("cola", "train", glue_dir)[0]] == [1, 0]
    assert [r["label"] for r in read_glue_tsv("stsb", "validation", glue_dir)[0]] == [5.0, 4.75]


def test_bad_labels_and_empty_texts_are_counted(tmp_path):
    (tmp_path / "RTE").mkdir()
    (tmp_path / "RTE" / "dev.tsv").write_text(
        "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\ta\tb\tcontradiction\n2\t \tb\tentailment\n3\ta\t\tnot_entailment\n"
    )
    rows, skipped = read_glue_tsv("rte", "validation", tmp_path)
    assert rows == [{"text": "a", "text_pair": "b", "label": 0}]
    assert skipped == {"label_outside_set": 1, "empty_text": 2}
    (tmp_path / "STS-B").mkdir()
    (tmp_path / "STS-B" / "dev.tsv").write_text("sentence1\tsentence2\tscore\na\tb\t5.5\na\tb\tx\na\tb\t0\n")
    rows, skipped = read_glue_tsv("stsb", "validation", tmp_path)
    assert [r["label"] for r in rows] == [0.0] and skipped == {"label_outside_set": 2}


def test_missing_column_and_unknown_names(tmp_path):
    (tmp_path / "SST-2").mkdir()
    (tmp_path / "SST-2" / "train.tsv").write_text("text\tlabel\nfine\t1\n")
    with pytest.raises(
        ValueError, match=r"SST-2.train\.tsv: missing column\(s\) \['sentence'\]; columns found: \['text', 'label'\]"
    ):
        read_glue_tsv("sst2", "train", tmp_path)
    with pytest.raises(ValueError, match="unknown GLUE task 'wnli'"):
        read_glue_tsv("wnli", "train", tmp_path)
    with pytest.raises(ValueError, match="'mnli' has no split 'validation'.*validation_matched"):
        read_glue_tsv("mnli", "validation", tmp_path)


def test_hub_rows_map_columns_and_test_labels():
    """`glue_hub_rows` is what the `glue_hub` task format runs on the `hf` source's saved splits."""
    assert glue_hub_rows("mnli", [{"premise": "P.", "hypothesis": "H.", "label": 2, "idx": 0}])[0] == [
        {"text": "P.", "text_pair": "H.", "label": 2}
    ]
    assert glue_hub_rows("mnli", [{"premise": "P.", "hypothesis": "H.", "label": -1, "idx": 0}])[0] == [
        {"text": "P.", "text_pair": "H.", "label": None}
    ]
    assert glue_hub_rows("cola", [{"sentence": "S.", "label": 1, "idx": 0}])[0] == [{"text": "S.", "text_pair": None, "label": 1}]
    assert glue_hub_rows("stsb", [{"sentence1": "A.", "sentence2": "B.", "label": 3.8, "idx": 0}])[0] == [
        {"text": "A.", "text_pair": "B.", "label": 3.8}
    ]
    assert glue_hub_rows("qqp", [{"question1": "Q1?", "question2": "", "label": 0, "idx": 0}]) == ([], {"empty_text": 1})
    with pytest.raises(ValueError, match=r"nyu-mll/glue rte record 0: missing column\(s\) \['sentence2'\]"):
        glue_hub_rows("rte", [{"sentence1": "A.", "label": 0}])


def test_vader_movie_snippets(tmp_path):
    path = tmp_path / "movieReviewSnippets_GroundTruth.txt"
    lines = [
        "id\tsentiment\ttext",
        "1\t2.26666666667\tThe Rock is destined to be the 21st Century's new ''Conan'' and that he's going to make a splash.",
        "3\t-0.6\tEffective but too tepid biopic",
        "4\t9.5\tout of range",
        "5\tn/a\tnot a number",
        "6\t1.0\t ",
    ]
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    rows, skipped = read_vader_movie_snippets(path)
    assert rows[1] == {"text": "Effective but too tepid biopic", "text_pair": None, "label": -0.6}
    assert rows[0]["text"].endswith("''Conan'' and that he's going to make a splash.")
    assert skipped == {"label_outside_set": 2, "empty_text": 1}


def test_boolq_both_flavours_and_overlap_removal(tmp_path):
    superglue = [
        {"question": "is the sky blue", "passage": "Sky -- The sky is blue.", "idx": 0, "label": True},
        {"question": "do fish fly", "passage": "Fish -- Some fish glide.", "idx": 1, "label": False},
        {"question": "is it a test", "passage": "Test -- Unlabeled.", "idx": 0},
        {"question": "bad label", "passage": "X -- y", "idx": 2, "label": "maybe"},
    ]
    original = [{"question": "do fish fly", "title": "Fish", "answer": "False", "passage": "Some fish glide."}]
    (tmp_path / "combined.jsonl").write_text("\n".join(map(json.dumps, superglue)) + "\n")
    (tmp_path / "dev.jsonl").write_text("\n".join(map(json.dumps, original)) + "\n")
    combined, skipped = read_boolq_jsonl(tmp_path / "combined.jsonl")
    dev, _ = read_boolq_jsonl(tmp_path / "dev.jsonl")
    assert [r["label"] for r in combined] == [1, 0, None] and skipped == {"label_outside_set": 1}
    assert dev == [{"text": "do fish fly", "text_pair": "Fish -- Some fish glide.", "label": 0}]
    train, removed = remove_overlap([r for r in combined if r["label"] is not None], dev)
    assert train == combined[:1] and removed == {"in_held_out_split": 1}


def test_boolq_missing_key(tmp_path):
    (tmp_path / "bias.jsonl").write_text(json.dumps({"original_question": "q", "original_context": "c"}) + "\n")
    with pytest.raises(ValueError, match=r"bias\.jsonl line 1: missing key\(s\) \['question', 'passage'\]"):
        read_boolq_jsonl(tmp_path / "bias.jsonl")
