"""The official SQuAD 2.0 evaluation: exact match, F1 and the no-answer threshold.

Answers are compared after lower-casing and removing punctuation, the articles a/an/the and
extra whitespace; a question's score is the best over its gold answers; an unanswerable
question scores 1 exactly when the prediction is empty. Scores are percentages, as the papers
report them. Rows are in the Hugging Face ``squad_v2`` schema (maskbench.data.squad).

A question the no-answer threshold blanks is not re-scored as the answer "": it scores 1 when
unanswerable and 0 when answerable, as the official ``evaluate-v2.0.py`` does
(``apply_no_ans_threshold``: ``float(not qid_to_has_ans[qid])``, where "has an answer" means
the question lists gold answers, not that they survive normalisation). The two differ on an
answerable question whose gold answers all normalise to "" (e.g. "The"): re-scored, the blank
would match the unanswerable gold [""] and count as correct.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import NamedTuple

Row = dict

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


def _answered(row: Row, prediction: str) -> QuestionScore:
    """The prediction against the question's gold answers (the official ``get_raw_scores``)."""
    golds = _gold_texts(row)
    return QuestionScore(bool(row["answers"]["text"]), exact_match(prediction, golds), f1(prediction, golds))


def _blanked(row: Row) -> QuestionScore:
    """A question the no-answer threshold blanks: right exactly when it lists no gold answer
    (the official ``apply_no_ans_threshold``; module docstring)."""
    has_answer = bool(row["answers"]["text"])
    return QuestionScore(has_answer, float(not has_answer), float(not has_answer))


def _per_question(rows: Sequence[Row], predictions: Mapping[str, str],
                  blanked: Mapping[str, bool] | None = None) -> list[QuestionScore]:
    """Each question's scores; those `blanked` marks True scored as blanked by the threshold."""
    if not rows:
        raise ValueError("no questions to score")
    _require_every_question(predictions, rows, "prediction")
    blanked = blanked or {}
    return [_blanked(row) if blanked.get(row["id"]) else _answered(row, predictions[row["id"]]) for row in rows]


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
    ``null_threshold`` is predicted unanswerable and scored as the official script scores it
    (module docstring)."""
    blanked = None
    if na_probs is not None:
        _require_every_question(na_probs, rows, "na_prob")
        blanked = {r["id"]: na_probs[r["id"]] > null_threshold for r in rows}
    return _summary(_per_question(rows, predictions, blanked))


def squad_v2_final_scores(rows: Sequence[Row], answers: Mapping[str, str]) -> dict[str, float]:
    """`squad_v2_scores` of final answers, the no-answer threshold already applied: an empty
    answer is the threshold's blank (1 when unanswerable, 0 when answerable; module docstring).
    What fine-tuning's prediction records hold (``finetune.qa``: an empty answer there is
    always a blank, as a question without any valid span has an infinite no-answer score)."""
    _require_every_question(answers, rows, "answer")
    return _summary(_per_question(rows, answers, {r["id"]: answers[r["id"]] == "" for r in rows}))


def _summary(scores: Sequence[QuestionScore]) -> dict[str, float]:
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
    ``-inf`` means "answer nothing". A blanked question scores as `squad_v2_scores` scores it at
    the threshold (the official ``apply_no_ans_threshold``), an answered one by its prediction,
    so the best score is the score at the best threshold. (The official ``find_best_thresh``
    counts an answered unanswerable question -1 whenever its prediction is a non-empty string,
    even one that normalises to "" and that ``apply_no_ans_threshold`` then scores 1.)"""
    _require_every_question(na_probs, rows, "na_prob")
    answered = _per_question(rows, predictions)
    unanswered = [_blanked(row) for row in rows]
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
