"""The official SQuAD 2.0 scores (`maskbench.eval.squad`): answer normalisation, exact match and
F1 on hand-worked cases, unanswerable questions, the no-answer threshold and its best value."""

import math

import pytest

from maskbench.eval.squad import (
    best_null_threshold,
    exact_match,
    f1,
    normalize_answer,
    squad_v2_final_scores,
    squad_v2_scores,
)


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


# q5: answerable, but its only gold answer, "The", normalises to "" (as the unanswerable q6's
# missing answer does); the official evaluate-v2.0.py scores a question the threshold blanks by
# whether it lists gold answers: q5 blanked scores 0, q6 blanked scores 1.
ARTICLE_ONLY = [{"id": "q5", "answers": {"text": ["The"], "answer_start": [0]}},
                {"id": "q6", "answers": {"text": [], "answer_start": []}}]


def test_threshold_blanks_an_answerable_question_to_zero_even_when_its_gold_normalises_empty():
    predictions = {"q5": "the", "q6": "cat"}
    answered = squad_v2_scores(ARTICLE_ONLY, predictions)
    # answered: "the" matches "The" (both normalise to ""); "cat" on the unanswerable q6 is wrong
    assert (answered["HasAns_exact"], answered["NoAns_exact"]) == (100.0, 0.0)
    blanked = squad_v2_scores(ARTICLE_ONLY, predictions, {"q5": 0.9, "q6": 0.9}, null_threshold=0.5)
    assert (blanked["HasAns_exact"], blanked["HasAns_f1"]) == (0.0, 0.0)
    assert (blanked["NoAns_exact"], blanked["NoAns_f1"]) == (100.0, 100.0)
    assert blanked["exact"] == 50.0
    # the same blanks as final answers (what fine-tuning's prediction records hold)
    assert squad_v2_final_scores(ARTICLE_ONLY, {"q5": "", "q6": ""}) == blanked


def test_best_null_threshold_counts_a_blanked_answerable_question_as_wrong():
    # answer nothing: q5 0 + q6 1 = 1; answer q5 (0.2): +1 -> 2; answer q6 too (0.8): -1 -> 1
    best = best_null_threshold(ARTICLE_ONLY, {"q5": "the", "q6": "cat"}, {"q5": 0.2, "q6": 0.8})
    assert best == {"best_exact": 100.0, "best_exact_thresh": 0.2, "best_f1": 100.0, "best_f1_thresh": 0.2}
    # re-scoring the blank "" against q5's normalised-empty gold would have made "answer
    # nothing" score 2 of 2 at -inf; officially it scores 1
    nothing = squad_v2_scores(ARTICLE_ONLY, {"q5": "the", "q6": "cat"}, {"q5": 0.2, "q6": 0.8}, -math.inf)
    assert nothing["exact"] == 50.0
