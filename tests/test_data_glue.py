"""GLUE's readers (`maskbench.data.glue`): every official TSV layout and split, malformed lines,
bad labels and empty texts counted, missing columns named; the hub rows' column mapping."""

import pytest

from maskbench.data.glue import GLUE_TASKS, glue_hub_rows, read_glue_tsv
from tests.samples import GLUE_FILES


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
    ("mrpc", "train"): ('Amrozi accused his brother , whom he called " the witness " , of deliberately '
                        'distorting his evidence .',
                        'Referring to him as only " the witness " , Amrozi accused his brother of deliberately '
                        'distorting his evidence .', 1),
    ("mrpc", "test"): ("PCCW 's chief operating officer , Mike Butcher , and Alex Arena , the chief financial "
                       "officer , will report directly to Mr So .",
                       "Current Chief Operating Officer Mike Butcher and Group Chief Financial Officer Alex Arena "
                       "will report to So .", None),
    ("qqp", "test"): ("Why am I mentally very lonely? How can I solve it?",
                      "Find the remainder when [math]23^{24}[/math] is divided by 24,23?", None),
    ("stsb", "validation"): ("A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.", 5.0),
    ("mnli", "train"): ("Conceptually cream skimming has two basic dimensions - product and geography.",
                        "Product and geography are what make cream skimming work.", 1),
    ("mnli", "validation_matched"): ("The new rights are nice enough", "Everyone really likes the newest benefits", 1),
    ("mnli", "validation_mismatched"): ("Your contribution helped make it possible for us to provide our students "
                                        "with a quality education.",
                                        "Your contributions were of no help with our students' education.", 2),
    ("mnli", "test_matched"): ("Hierbas, ans seco, ans dulce, and frigola are just a few names worth keeping a "
                               "look-out for.",
                               "Hierbas is a name worth looking out for.", None),
    ("mnli", "test_mismatched"): ("What have you decided, what are you going to do?", "So what's your decision?", None),
    ("qnli", "validation"): ("What came into force after the new constitution was herald?",
                             "As of that day, the new constitution heralding the Second Republic came into force.", 0),
    ("qnli", "test"): ("What organization is devoted to Jihad against Israel?",
                       'For some decades prior to the First Palestine Intifada in 1987, the Muslim Brotherhood in '
                       'Palestine took a "quiescent" stance towards Israel.', None),
    ("rte", "train"): ("No Weapons of Mass Destruction Found in Iraq Yet.",
                       "Weapons of Mass Destruction Found in Iraq.", 1),
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
        "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\ta\tb\tcontradiction\n2\t \tb\tentailment\n3\ta\t\t"
        "not_entailment\n"
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
    assert glue_hub_rows("cola", [{"sentence": "S.", "label": 1, "idx": 0}])[0] == [{"text": "S.",
                                                                                     "text_pair": None, "label": 1}]
    assert glue_hub_rows("stsb", [{"sentence1": "A.", "sentence2": "B.", "label": 3.8, "idx": 0}])[0] == [
        {"text": "A.", "text_pair": "B.", "label": 3.8}
    ]
    assert glue_hub_rows("qqp", [{"question1": "Q1?", "question2": "", "label": 0, "idx": 0}]) == ([],
                                                                                                   {"empty_text": 1})
    with pytest.raises(ValueError, match=r"nyu-mll/glue rte record 0: missing column\(s\) \['sentence2'\]"):
        glue_hub_rows("rte", [{"sentence1": "A.", "label": 0}])
