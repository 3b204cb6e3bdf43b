"""The metrics the pipeline scores with (`maskbench.eval.metrics.score`) agree with sklearn and
scipy on random data, missing labels included, and model selection ranks NaN last."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef, mean_squared_error, roc_auc_score

from maskbench.eval.metrics import all_scores, score, selection_key


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


def test_selection_ranks_nan_below_every_score():
    assert selection_key("accuracy", math.nan) == -math.inf < selection_key("accuracy", -1e9)
    assert selection_key("rmse", math.nan) == -math.inf < selection_key("rmse", 1e9)
    assert selection_key("rmse", 0.5) > selection_key("rmse", 0.7)
    assert max([math.nan, 0.2, 0.9], key=lambda v: selection_key("accuracy", v)) == 0.9
