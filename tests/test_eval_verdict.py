"""The noise rule (`maskbench.eval.verdict`) on synthetic predictions: a clear gap is decided,
overlapping seeds are not, an arm below the `none` control did not learn, lower-is-better metrics
sign correctly, undefined resamples are dropped and counted, and the same seed gives the same
answer."""

from __future__ import annotations

import numpy as np
import pytest

from maskbench.eval.verdict import (
    A_BETTER,
    B_BETTER,
    DID_NOT_LEARN,
    NO_DECLARED_SPREAD,
    UNDECIDED,
    DeclaredSpread,
    claim_outcome,
    compare,
    decided_counts,
    draw_examples,
    headline_score,
    question_scores,
    resampled_scores,
)

N = 400
LABELS = np.random.default_rng(0).integers(0, 2, N)


def seed_outputs(accuracy: float, seed: int) -> np.ndarray:
    """Two-class probabilities right on a fraction `accuracy` of the examples."""
    right = np.random.default_rng(seed).random(N) < accuracy
    predicted = np.where(right, LABELS, 1 - LABELS)
    return np.eye(2)[predicted] * 0.8 + 0.1


def arm(accuracies, first_seed: int, indices, labels=LABELS, metric="accuracy", outputs=seed_outputs):
    return resampled_scores(headline_score(metric, labels), [outputs(a, first_seed + i) for i, a in
                                                              enumerate(accuracies)], indices)


INDICES = draw_examples(N, resamples=300, seed=0)


def test_a_clear_gap_is_decided_both_ways():
    strong, weak = arm([0.80, 0.81, 0.79], 10, INDICES), arm([0.60, 0.62, 0.61], 20, INDICES)
    result = compare(strong, weak, higher_is_better=True, confidence=0.95, seed=0)
    assert result.outcome == A_BETTER and 0 < result.low < result.difference < result.high
    assert result.resamples == 300 and result.dropped == 0
    assert compare(weak, strong, True, 0.95, 0).outcome == B_BETTER
    assert claim_outcome([A_BETTER, A_BETTER, UNDECIDED]) == "holds"


def test_overlapping_seeds_are_not_decided():
    """Centres 68 against 67 with seeds spread over ten points: the gap is inside the noise."""
    a, b = arm([0.62, 0.70, 0.72], 30, INDICES), arm([0.60, 0.68, 0.73], 40, INDICES)
    result = compare(a, b, True, 0.95, 0)
    assert result.outcome == UNDECIDED and result.low < 0 < result.high
    assert claim_outcome([UNDECIDED, UNDECIDED]) == "not decided"


def test_an_arm_no_better_than_none_is_told_apart_and_counts_leave_it_out():
    none, arm_a, arm_b = (arm([0.70, 0.71, 0.69], 50, INDICES), arm([0.69, 0.70, 0.70], 60, INDICES),
                          arm([0.55, 0.56, 0.54], 70, INDICES))
    a_vs_b, a_vs_none, b_vs_none = (compare(arm_a, arm_b, True, 0.95, 0), compare(arm_a, none, True, 0.95, 0),
                                    compare(arm_b, none, True, 0.95, 0))
    assert a_vs_b.outcome == A_BETTER and a_vs_none.outcome != A_BETTER and b_vs_none.outcome != A_BETTER
    outcomes = [DID_NOT_LEARN, B_BETTER, UNDECIDED]
    assert claim_outcome(outcomes) == "does not hold"  # the task that did not learn does not count
    assert decided_counts(outcomes) == "decided on 1 of 3 tasks (1 not decided, 1 did not learn)"
    assert claim_outcome([A_BETTER, B_BETTER, DID_NOT_LEARN]) == "mixed"


def test_lower_is_better_metrics_sign_so_that_positive_means_a_is_better():
    truth = np.random.default_rng(1).normal(size=N)

    def regression(noise: float, seed: int) -> np.ndarray:
        return truth + np.random.default_rng(seed).normal(scale=noise, size=N)

    close, far = (arm([0.3, 0.31, 0.29], 80, INDICES, truth, "rmse", regression),
                  arm([0.9, 0.92, 0.88], 90, INDICES, truth, "rmse", regression))
    result = compare(close, far, higher_is_better=False, confidence=0.95, seed=0)
    assert result.outcome == A_BETTER and result.difference == pytest.approx(0.6, abs=0.05)
    assert compare(far, close, False, 0.95, 0).outcome == B_BETTER


def test_same_seed_same_answer_other_seed_other_draws():
    def run(seed):
        indices = draw_examples(N, 200, seed)
        return compare(arm([0.62, 0.70, 0.72], 30, indices), arm([0.60, 0.68, 0.73], 40, indices), True, 0.95, seed)

    assert run(0) == run(0)
    assert run(0) != run(1)


def test_undefined_resamples_are_dropped_and_counted():
    """ROC-AUC with 2 positives in 12 examples: some draws hold one class only."""
    labels = np.array([1, 1] + [0] * 10, dtype=np.float64)[:, None]
    indices = draw_examples(len(labels), 300, 0)

    def scores(strength, seed):
        return labels + np.random.default_rng(seed).normal(scale=strength, size=labels.shape)

    a = arm([0.1, 0.1], 0, indices, labels, "roc_auc", scores)
    b = arm([3.0, 3.0], 5, indices, labels, "roc_auc", scores)
    result = compare(a, b, True, 0.95, 0)
    assert 0 < result.dropped < result.resamples
    assert np.isnan(a[:, 1:]).any() and not np.isnan(a[:, 0]).any()


def test_a_baseline_is_an_arm_of_one_seed():
    majority = resampled_scores(headline_score("accuracy", LABELS), [np.tile([0.9, 0.1], (N, 1))], INDICES)
    assert majority.shape == (1, 301)
    assert compare(arm([0.80, 0.81, 0.79], 10, INDICES), majority, True, 0.95, 0).outcome == A_BETTER


def test_squad_questions_are_rescored_by_the_official_rules():
    per_question = question_scores("squad_v2_f1", ["", "the cat sat", "dog"], [[], ["cat sat down"], ["cat"]])
    assert per_question == pytest.approx([1.0, 0.8, 0.0])
    assert question_scores("squad_v2_exact", ["The cat."], [["cat"]]) == pytest.approx([1.0])
    score = headline_score("squad_v2_f1", np.array([]))
    assert score(per_question, np.array([0, 0, 1])) == pytest.approx(2.8 / 3)


@pytest.mark.parametrize("metric", ["roc_auc", "squad_v2_f1"])
def test_batched_rescoring_equals_scoring_each_draw(metric, monkeypatch):
    """ROC-AUC and SQuAD rescore all draws at once (in chunks): the same numbers as `score` on
    each draw, NaN where a draw holds one class, missing labels of a multi-task set left out."""
    from maskbench.eval import verdict
    from maskbench.eval.metrics import score

    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, (12, 3)).astype(float)
    labels[rng.random((12, 3)) < 0.3] = np.nan
    labels[:, 2] = np.where(np.isnan(labels[:, 2]), np.nan, 1.0)  # one class only: left out of the mean
    seeds = [rng.integers(0, 4, (12, 3)) / 3 for _ in range(2)]  # ties
    if metric == "squad_v2_f1":
        labels, seeds = np.array([]), [rng.random(12) for _ in range(2)]
    indices = draw_examples(12, resamples=300, seed=0)
    monkeypatch.setattr(verdict, "BATCH_VALUES", 100)  # several chunks
    batched = resampled_scores(headline_score(metric, labels), seeds, indices)
    rows = np.concatenate([np.arange(12)[None], indices])
    each = np.array([[score(metric, labels[r], s[r]) if metric == "roc_auc" else s[r].mean() for r in rows]
                     for s in seeds])
    assert batched.shape == (2, 301) and np.isnan(batched).any() == np.isnan(each).any()
    np.testing.assert_allclose(batched, each, rtol=0, atol=1e-12)  # NaN where NaN


def test_between_recipes_a_one_seed_arm_adds_its_declared_pretraining_spread():
    """One pretraining seed per arm: the interval adds each arm's declared spread (sd^2 / 1) to
    the resamples' variance, with the figure's degrees of freedom in the Satterthwaite sum; a
    gap the runs as built decide is not decided between the recipes when the spread is wide."""
    a, b = arm([0.85, 0.86, 0.84], 10, INDICES), arm([0.75, 0.76, 0.74], 20, INDICES)
    built = compare(a, b, True, 0.95, 0)
    spread = DeclaredSpread(0.05, 24, "t 5 points, measured on 25 seeds")
    recipes = compare(a, b, True, 0.95, 0, ([spread], [spread]))
    assert built.outcome == A_BETTER and "conditional on one pretraining run per arm" in built.noise
    assert recipes.difference == built.difference and recipes.outcome == UNDECIDED
    assert recipes.se ** 2 == pytest.approx(built.se ** 2 + 2 * 0.05 ** 2)
    # the figure's degrees of freedom count: 24 each outweigh the fine-tuning seeds' 2, an assumed one's 1 does not
    assumed = DeclaredSpread(0.05, 1, "t 5 points, assumed")
    assert compare(a, b, True, 0.95, 0, ([assumed], [assumed])).df < built.df < recipes.df
    assert recipes.noise == ("fine-tuning seeds (3) and test examples, and the declared pretraining spread "
                             "(t 5 points, measured on 25 seeds)")
    # a fixed arm (a baseline, `none`) adds nothing; neither does an arm of 3 pretraining seeds
    assert compare(a, b, True, 0.95, 0, ([spread], None)).se ** 2 == pytest.approx(built.se ** 2 + 0.05 ** 2)
    three = np.stack([a, a + 0.001, a - 0.001])
    assert compare(three, three - 0.05, True, 0.95, 0, ([spread], [spread])).se == pytest.approx(
        compare(three, three - 0.05, True, 0.95, 0).se)


def test_one_pretraining_seed_without_a_declared_spread_is_never_decided():
    """However clear the gap, a task without a declared pretraining spread cannot be decided
    between recipes of one pretraining seed; with two seeds the drawn seeds show their spread."""
    a, b = arm([0.90, 0.91, 0.89], 10, INDICES), arm([0.50, 0.51, 0.49], 20, INDICES)
    found = compare(a, b, True, 0.95, 0, ([None], [None]))
    assert (found.outcome, found.why) == (UNDECIDED, NO_DECLARED_SPREAD) and np.isnan(found.p)
    assert found.noise.endswith(f"; {NO_DECLARED_SPREAD} for a task")
    two = compare(np.stack([a, a]), np.stack([b, b]), True, 0.95, 0, ([None], [None]))
    assert two.outcome == A_BETTER and not two.why
