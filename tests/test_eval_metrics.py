"""The metrics the pipeline scores with (`maskbench.eval.metrics`): `score` agrees with sklearn and
scipy on random data, missing labels included, and with hand-worked cases; `all_scores` adds the
companion scores; model selection ranks NaN last; the rank-based ROC-AUC equals sklearn's,
ties included; ROC-AUC per task names the tasks it leaves out,
RMSE leaves out missing labels."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef, mean_squared_error, roc_auc_score

from maskbench.eval.metrics import all_scores, higher_is_better, rmse, roc_auc, roc_auc_per_task, score, selection_key

NAN = math.nan


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def class_probabilities(rng, n, classes):
    logits = rng.normal(size=(n, classes))
    return np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)


@pytest.mark.parametrize("classes", [2, 3])
def test_classification_metrics_match_sklearn(rng, classes):
    labels = rng.integers(0, classes, 200)
    probs = class_probabilities(rng, 200, classes)
    predicted = probs.argmax(-1)
    assert score("accuracy", labels, probs) == pytest.approx(accuracy_score(labels, predicted))
    assert score("matthews_corr", labels, probs) == pytest.approx(matthews_corrcoef(labels, predicted))
    if classes == 2:
        assert score("f1", labels, probs) == pytest.approx(f1_score(labels, predicted))
    assert ("f1" in all_scores("classification", "accuracy", labels, probs)) == (classes == 2)


def test_regression_metrics_match_scipy_and_sklearn(rng):
    labels = rng.normal(size=150)
    predicted = labels + rng.normal(scale=0.7, size=150)
    assert score("pearson", labels, predicted) == pytest.approx(pearsonr(labels, predicted)[0])
    assert score("spearman", labels, predicted) == pytest.approx(spearmanr(labels, predicted)[0])
    assert score("rmse", labels, predicted) == pytest.approx(math.sqrt(mean_squared_error(labels, predicted)))


def test_regression_metrics_leave_out_missing_labels(rng):
    labels = rng.normal(size=150)
    predicted = labels + rng.normal(scale=0.7, size=150)
    missing = rng.random(150) < 0.2
    with_gaps = np.where(missing, np.nan, labels)
    known = ~missing
    assert score("pearson", with_gaps, predicted) == pytest.approx(pearsonr(labels[known], predicted[known])[0])
    assert score("spearman", with_gaps, predicted) == pytest.approx(spearmanr(labels[known], predicted[known])[0])
    assert score("rmse", with_gaps, predicted) == pytest.approx(
        math.sqrt(mean_squared_error(labels[known], predicted[known])))


def test_roc_auc_is_the_mean_over_tasks_of_sklearn_on_labelled_molecules(rng):
    labels = rng.integers(0, 2, (300, 4)).astype(float)
    labels[rng.random((300, 4)) < 0.3] = np.nan
    labels[:, 3] = np.where(np.isnan(labels[:, 3]), np.nan, 1.0)  # one class only: left out
    scores = rng.random((300, 4))
    expected = np.mean([roc_auc_score(labels[~np.isnan(labels[:, t]), t], scores[~np.isnan(labels[:, t]), t])
                        for t in range(3)])
    assert score("roc_auc", labels, scores) == pytest.approx(expected)
    assert math.isnan(score("roc_auc", labels[:, 3:], scores[:, 3:]))  # no task has both classes


@pytest.mark.parametrize("n", [2, 3, 10, 57, 400])
def test_rank_based_roc_auc_equals_sklearn_with_ties(rng, n):
    for levels in (2, 5, 1000):  # few distinct scores: many ties; many: almost none
        for _ in range(20):
            labels = rng.integers(0, 2, n)
            if labels.min() == labels.max():
                continue
            scores = rng.integers(0, levels, n) / levels
            assert roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
            assert roc_auc(labels.astype(float), -scores) == pytest.approx(roc_auc_score(labels, -scores), abs=1e-12)


def test_rank_based_roc_auc_edge_cases_and_batches(rng):
    assert roc_auc([0, 1], [0.3, 0.3]) == 0.5  # all tied
    assert roc_auc([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4]) == 1.0
    assert roc_auc([1, 1, 0, 0], [0.1, 0.2, 0.3, 0.4]) == 0.0
    for labels in ([1, 1, 1], [0, 0], [1], []):  # one class, or none: undefined, as before
        assert math.isnan(roc_auc(labels, np.zeros(len(labels))))
    with pytest.raises(ValueError):
        roc_auc([0, 1], [0.1, 0.2, 0.3])
    # missing labels (NaN) are left out, whatever their scores (ties with labelled ones included)
    labels, scores = np.array([1, NAN, 0, 1, NAN, 0, 0]), np.array([0.5, 0.5, 0.2, 0.9, np.inf, 0.5, 0.7])
    known = ~np.isnan(labels)
    assert roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels[known], scores[known]))
    # leading dimensions: every row scored on its own (the bootstrap's resamples in one call)
    labels, scores = rng.integers(0, 2, (6, 40)), rng.integers(0, 4, (6, 40)).astype(float)
    labels[5] = 1
    batched = roc_auc(labels, scores)
    assert batched.shape == (6,) and math.isnan(batched[5])
    assert batched[:5] == pytest.approx([roc_auc_score(labels[i], scores[i]) for i in range(5)])


def test_selection_ranks_nan_below_every_score():
    assert selection_key("accuracy", math.nan) == -math.inf < selection_key("accuracy", -1e9)
    assert selection_key("rmse", math.nan) == -math.inf < selection_key("rmse", 1e9)
    assert selection_key("rmse", 0.5) > selection_key("rmse", 0.7)
    assert max([math.nan, 0.2, 0.9], key=lambda v: selection_key("accuracy", v)) == 0.9


def probs(classes, n=2):
    return np.eye(n)[classes] * 0.8 + 0.1


def test_metrics_on_hand_worked_cases():
    y = np.array([0, 1, 1, 0])
    p = probs([0, 1, 0, 0])
    assert score("accuracy", y, p) == 0.75
    # confusion: TP=1 TN=2 FP=0 FN=1 → MCC = (1·2 − 0·1)/sqrt(1·2·3·2) = 2/sqrt(12)
    assert score("matthews_corr", y, p) == pytest.approx(2 / math.sqrt(12))
    assert score("f1", y, p) == pytest.approx(2 / 3)  # precision 1, recall 1/2
    assert score("spearman", np.array([1.0, 2, 3, 4]), np.array([10.0, 20, 30, 25])) == pytest.approx(0.8)
    assert score("rmse", np.array([1.0, np.nan, 3.0]), np.array([2.0, 9.0, 3.0])) == pytest.approx(math.sqrt(0.5))
    # ROC-AUC: of the 4 (pos, neg) pairs, 3 are ordered → 0.75; task 2 has one class and is left out
    y_multi = np.array([[0, 1], [0, 1], [1, np.nan], [1, 1]])
    s_multi = np.array([[0.1, 0.5], [0.4, 0.5], [0.35, 0.5], [0.8, 0.5]])
    assert score("roc_auc", y_multi, s_multi) == 0.75
    assert not higher_is_better("rmse") and higher_is_better("roc_auc")


def test_all_scores_adds_companions():
    scores = all_scores("classification", "matthews_corr", np.array([0, 1, 1, 0]), probs([0, 1, 0, 0]))
    assert list(scores) == ["matthews_corr", "accuracy", "f1"]
    three_class = all_scores("classification", "accuracy", np.array([0, 1, 2]), probs([0, 1, 2], 3))
    assert "f1" not in three_class


def test_roc_auc_masks_missing_labels_and_reports_skipped_tasks():
    y_true = np.array([[1, 0, NAN, 1], [0, 0, NAN, 1], [1, NAN, NAN, 1], [0, 0, NAN, 0], [NAN, 0, NAN, NAN]])
    y_score = np.array(
        [[0.9, 0.1, 0.5, 0.8], [0.2, 0.3, 0.5, 0.3], [0.4, 0.9, 0.5, 0.6], [0.6, 0.2, 0.5, 0.7], [0.5, 0.5, 0.5, 0.1]]
    )
    aucs = roc_auc_per_task(y_true, y_score, ["a", "b", "c", "d"])
    # a: positives 0.9, 0.4 vs negatives 0.2, 0.6 -> 3 of 4 pairs ordered; d: 0.8, 0.3, 0.6 vs 0.7 -> 1 of 3
    assert aucs.per_task == {"a": pytest.approx(0.75), "d": pytest.approx(1 / 3)}
    assert aucs.per_task["d"] == pytest.approx(roc_auc_score([1, 1, 1, 0], [0.8, 0.3, 0.6, 0.7]))
    assert aucs.skipped == {
        "b": "only one class present (0 positive of 4 labelled)",
        "c": "no labelled molecules in this split",
    }
    assert aucs.mean == pytest.approx((0.75 + 1 / 3) / 2)


def test_roc_auc_single_task_and_all_skipped():
    assert roc_auc_per_task([0, 1, 1], [0.1, 0.9, 0.8]).per_task == {"0": 1.0}
    assert math.isnan(roc_auc_per_task([1, 1], [0.1, 0.9]).mean)


def test_rmse_masks_missing_labels():
    assert rmse([1.0, NAN, 3.0], [2.0, 100.0, 1.0]) == pytest.approx(math.sqrt((1 + 4) / 2))
    with pytest.raises(ValueError):
        rmse([NAN], [1.0])
