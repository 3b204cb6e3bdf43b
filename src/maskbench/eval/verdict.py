"""Is arm A better than arm B on a task, beyond the noise? A paired, hierarchical bootstrap
over pretraining seeds, fine-tuning seeds and evaluation examples.

A gap between two medians of three seeds (68.2 ± 2.2 against 67.5 ± 1.6) says little: the
seeds scatter, another pretraining run of the same arm scatters more (the MultiBERTs), and
so would the score on another draw of test examples. Each resample here draws, per arm and
independently (their runs are unrelated), the pretraining seeds with replacement, then within
each drawn pretraining seed its fine-tuning seeds with replacement (the Multi-Bootstrap of
Sellam et al., 2022), and the example indices with replacement (the same indices for both
arms: they were scored on the same examples, and pairing cancels the examples' shared
difficulty); it rescores every drawn seed's predictions on the drawn examples with the task's
headline metric, averages over the drawn seeds and takes A − B signed so that positive means
A is better (RMSE: lower is better). The percentile interval of those differences at
`confidence` decides: wholly above zero, A is better; wholly below, B; otherwise the gap is
inside the noise. With one pretraining seed per arm the draw is the one-level bootstrap over
fine-tuning seeds and examples, and its verdict is conditional on that pretraining run
(`Comparison.noise` says which sources a verdict covers).

A rescored resample can be undefined (ROC-AUC when the drawn examples hold one class only, a
Spearman correlation of constant predictions): it is dropped and counted, never scored as a
number. An arm with fixed predictions (a trivial baseline) is an arm of one seed; a probe of
a frozen encoder has one fine-tuning "seed" per pretraining seed.

The example indices are drawn once per task (`draw_examples`), so one (run, seed) is rescored
once per task (`resampled_scores`) and every comparison on the task combines those scores
(`compare`): the work grows with the runs, not with the pairs compared.

    indices = draw_examples(n_examples, resamples=2000, seed=0)
    a = resampled_scores(score, outputs_of_a, indices)      # (seeds of A, 1 + resamples)
    b = resampled_scores(score, outputs_of_b, indices)      # or (pretraining, fine-tuning seeds, 1 + resamples)
    compare(a, b, higher_is_better=True, confidence=0.95, seed=0).outcome   # "A better" | ...
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from maskbench.eval.metrics import SPAN_METRICS, mean_roc_auc, score
from maskbench.eval.squad import squad_v2_final_scores

A_BETTER, B_BETTER, UNDECIDED = "A better", "B better", "not decided"
DID_NOT_LEARN = "did not learn"

# score(outputs of one seed, example indices) -> the headline metric on those examples
Score = Callable[[np.ndarray, np.ndarray], float]


@dataclass(frozen=True)
class BatchedScore:
    """A score that takes many draws at once: `fn(outputs, indices (draws, n))` -> (draws,)
    scores, NaN where undefined (`resampled_scores` calls it on chunks of draws)."""

    fn: Callable[[np.ndarray, np.ndarray], np.ndarray]

    def __call__(self, outputs: np.ndarray, index: np.ndarray) -> float:
        return float(self.fn(outputs, index[None])[0])


@dataclass(frozen=True)
class Comparison:
    """A − B (positive: A better) on all examples, averaged over each arm's seeds, and the
    percentile interval of its resamples; `dropped` resamples were undefined."""

    difference: float
    low: float
    high: float
    outcome: str
    resamples: int
    dropped: int
    noise: str = ""


def headline_score(metric: str, labels: np.ndarray) -> Score:
    """How a resample is rescored: `eval.metrics` on the drawn rows of output arrays, or, for
    SQuAD 2.0's F1 and EM (means over questions), the mean of the drawn `question_scores`.
    Those and ROC-AUC (rank-based, `eval.metrics.mean_roc_auc`) rescore all draws at once."""
    if metric in SPAN_METRICS:
        return BatchedScore(lambda per_question, indices: per_question[indices].mean(axis=-1))
    if metric == "roc_auc":
        columns = labels[:, None] if labels.ndim == 1 else labels  # (examples, tasks)
        return BatchedScore(lambda outputs, indices: mean_roc_auc(
            columns[indices], (outputs[:, None] if outputs.ndim == 1 else outputs)[indices]))
    return lambda outputs, index: score(metric, labels[index], outputs[index])


def question_scores(metric: str, predictions: Sequence[str], golds: Sequence[Sequence[str]]) -> np.ndarray:
    """Each question's SQuAD 2.0 F1 or EM (0..1) by the official evaluation, for answers already
    thresholded (an empty answer: the threshold's blank, `squad.squad_v2_final_scores`)."""
    official = metric.removeprefix("squad_v2_")  # squad_v2_f1 -> f1, squad_v2_exact -> exact
    scored = [squad_v2_final_scores([{"id": "q", "answers": {"text": list(gold)}}], {"q": answer})[official]
              for answer, gold in zip(predictions, golds)]
    return np.array(scored) / 100


def draw_examples(n_examples: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, n_examples) example indices drawn with replacement, shared by every arm."""
    if n_examples < 1:
        raise ValueError("the bootstrap needs at least one example")
    return np.random.default_rng(seed).integers(0, n_examples, size=(resamples, n_examples))


def resampled_scores(score: Score, seeds: Sequence[np.ndarray], indices: np.ndarray) -> np.ndarray:
    """(seeds, 1 + resamples): each seed's score on all examples (column 0), then on each row of
    `indices`; NaN where the score is undefined on the drawn examples."""
    rows = np.concatenate([np.arange(indices.shape[1])[None], indices])
    if isinstance(score, BatchedScore):
        return np.array([_batched(score, outputs, rows) for outputs in seeds], dtype=np.float64).reshape(
            len(seeds), len(rows))
    return np.array([[_defined_or_nan(score, outputs, index) for index in rows] for outputs in seeds],
                    dtype=np.float64)


BATCH_VALUES = 4_000_000  # drawn output values rescored at once (32 MB of float64)


def _batched(score: BatchedScore, outputs: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """A batched score on every row of `rows`, a chunk of rows at a time; NaN where undefined."""
    per_row = rows.shape[1] * max(1, int(np.prod(outputs.shape[1:])))
    chunk = max(1, BATCH_VALUES // per_row)
    values = np.concatenate([np.asarray(score.fn(outputs, rows[i:i + chunk]), dtype=np.float64).reshape(-1)
                             for i in range(0, len(rows), chunk)])
    return np.where(np.isfinite(values), values, np.nan)


def _defined_or_nan(score: Score, outputs: np.ndarray, index: np.ndarray) -> float:
    with warnings.catch_warnings():  # constant inputs to a correlation: undefined, counted below
        warnings.simplefilter("ignore")
        try:
            value = float(score(outputs, index))
        except ValueError:  # e.g. RMSE over drawn examples without a label
            return math.nan
    return value if math.isfinite(value) else math.nan


def compare(a: np.ndarray, b: np.ndarray, higher_is_better: bool, confidence: float, seed: int) -> Comparison:
    """Arm A against arm B from their `resampled_scores` over the same example draws, each
    (fine-tuning seeds, 1 + resamples) for one pretraining seed or (pretraining seeds,
    fine-tuning seeds, 1 + resamples): pretraining seeds drawn with replacement per arm, then
    fine-tuning seeds within each, the drawn scores averaged, A − B signed so that positive is
    better for A, the interval read at `confidence`. With one pretraining seed per arm the
    draws are exactly the one-level bootstrap's."""
    a, b = _hierarchical(a), _hierarchical(b)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"the arms were rescored on different draws ({a.shape[-1]} and {b.shape[-1]} columns)")
    sign = 1.0 if higher_is_better else -1.0
    difference = sign * (a[..., 0].mean() - b[..., 0].mean())
    rng = np.random.default_rng(seed)
    resamples = a.shape[-1] - 1
    columns = np.arange(1, resamples + 1)

    def seed_means(scores: np.ndarray) -> np.ndarray:
        pretrained, tuned = scores.shape[:2]
        if pretrained == 1:  # the one-level bootstrap, draw for draw
            drawn = rng.integers(0, tuned, size=(resamples, tuned))
            return scores[0][drawn, columns[:, None]].mean(axis=1)
        outer = rng.integers(0, pretrained, size=(resamples, pretrained))
        inner = rng.integers(0, tuned, size=(resamples, pretrained, tuned))
        return scores[outer[..., None], inner, columns[:, None, None]].mean(axis=(1, 2))

    differences = sign * (seed_means(a) - seed_means(b))
    defined = differences[~np.isnan(differences)]
    noise = noise_sources(a.shape[:2], b.shape[:2])
    if not defined.size:
        return Comparison(float(difference), math.nan, math.nan, UNDECIDED, resamples, resamples, noise)
    tail = (1 - confidence) / 2
    low, high = (float(q) for q in np.quantile(defined, [tail, 1 - tail]))
    outcome = A_BETTER if low > 0 else B_BETTER if high < 0 else UNDECIDED
    return Comparison(float(difference), low, high, outcome, resamples, resamples - defined.size, noise)


def _hierarchical(scores: np.ndarray) -> np.ndarray:
    """(pretraining seeds, fine-tuning seeds, 1 + resamples): a 2-D arm is one pretraining seed."""
    return scores[None] if scores.ndim == 2 else scores


def noise_sources(a: tuple[int, int], b: tuple[int, int]) -> str:
    """Which sources of noise a comparison of arms with (pretraining, fine-tuning) seeds `a`
    and `b` resampled: test examples always; fine-tuning and pretraining seeds where an arm has
    more than one (a fixed baseline has neither)."""
    pretrained, tuned = max(a[0], b[0]), max(a[1], b[1])
    covered = ([f"pretraining seeds ({pretrained})"] if pretrained > 1 else []) + (
        [f"fine-tuning seeds ({tuned})"] if tuned > 1 else []) + ["test examples"]
    text = ", ".join(covered[:-1]) + (" and " if len(covered) > 1 else "") + covered[-1]
    return text if pretrained > 1 else f"{text}; conditional on one pretraining run per arm"


def task_outcome(a_vs_b: Comparison, a_vs_none: Comparison | None, b_vs_none: Comparison | None) -> str:
    """A task's part in a claim: "did not learn" where either arm is not better than the `none`
    control beyond the noise (None: no control to check against), which takes the task out of
    the claim; else the comparison's outcome."""
    if any(c is not None and c.outcome != A_BETTER for c in (a_vs_none, b_vs_none)):
        return DID_NOT_LEARN
    return a_vs_b.outcome


def claim_outcome(outcomes: Sequence[str], support: str = A_BETTER, against: str = B_BETTER) -> str:
    """Over decided outcomes only: "holds" if more of them `support` the claim (A is better)
    than go `against` it, "does not hold" if fewer, "mixed" if as many, "not decided" if none
    is decided."""
    wins, losses = outcomes.count(support), outcomes.count(against)
    if not wins + losses:
        return "not decided"
    return "holds" if wins > losses else "does not hold" if wins < losses else "mixed"


def decided_counts(outcomes: Sequence[str], unit: str = "tasks", support: str = A_BETTER,
                   against: str = B_BETTER) -> str:
    """"decided on n of m tasks (u not decided, d did not learn)", counting `unit`s."""
    decided = outcomes.count(support) + outcomes.count(against)
    return (f"decided on {decided} of {len(outcomes)} {unit} ({outcomes.count(UNDECIDED)} not decided, "
            f"{outcomes.count(DID_NOT_LEARN)} did not learn)")
