"""Is arm A better than arm B, beyond the noise, on a task or on the mean over tasks? A paired,
hierarchical bootstrap over pretraining seeds, fine-tuning seeds and evaluation examples, read
with an interval made for few seeds.

A gap between two medians of three seeds (68.2 ± 2.2 against 67.5 ± 1.6) says little: the
seeds scatter, another pretraining run of the same arm scatters more (the MultiBERTs), and
so would the score on another draw of test examples. Each resample draws, per arm and
independently (their runs are unrelated), the arm's pretraining seeds with replacement (each
with the mean of its fine-tuning seeds; one draw for every task of a mean), or, for an arm of
one pretraining seed, its fine-tuning seeds, and the example indices with replacement (the same
indices for both arms: they were scored on the same examples, and pairing cancels the
examples' shared difficulty); it rescores every seed's predictions on the drawn examples with
the task's headline metric, averages over the drawn seeds (and over the tasks of a mean) and
takes A − B signed so that positive means A is better (RMSE: lower is better). Two or three
seeds drawn with replacement understate their spread, and their spread is itself a guess:
the drawn deviations are scaled by sqrt(n / (n - 1)) and the interval at `confidence` is
Student's t on the resamples' standard error with Satterthwaite's degrees of freedom
(`compare_tasks`). Wholly above zero, A is better; wholly below, B; otherwise the gap is inside
the noise. Between two recipes (`declared`), an arm of fewer than `FEW_PRETRAINING_SEEDS`
pretraining seeds adds its task's declared pretraining spread (`DeclaredSpread`, noise.yaml) to
the variance, so that a one-seed verdict is about the recipes, not about one pretraining run of
each; with one pretraining seed and no declared spread it is not decided (`NO_DECLARED_SPREAD`).
`Comparison.noise` says which sources a verdict covers. A claim of several parts (tasks
each, or a mean beside a task the paper states apart) decides its parts with Holm's rule
(`holm`), so the chance that any part is decided falsely stays at 1 - confidence.
docs/verdicts.md measures the rule's false-decision rate on simulated equal arms.

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
from scipy import stats

from maskbench.eval.metrics import SPAN_METRICS, mean_roc_auc, score
from maskbench.eval.squad import squad_v2_final_scores

A_BETTER, B_BETTER, UNDECIDED = "A better", "B better", "not decided"
DID_NOT_LEARN = "did not learn"
# An arm with fewer pretraining seeds than this adds its tasks' declared pretraining spread
# (docs/verdicts.md "Few pretraining seeds"): two seeds' spread rests on one degree of freedom.
FEW_PRETRAINING_SEEDS = 3
NO_DECLARED_SPREAD = "one pretraining seed; no declared pretraining spread"

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
    """A − B (positive: A better) on all examples, averaged over each arm's seeds (and over
    tasks, for a mean), and its interval (`compare_tasks`); `dropped` resamples were undefined."""

    difference: float
    low: float
    high: float
    outcome: str
    resamples: int
    dropped: int
    noise: str = ""
    p: float = math.nan       # two-sided: decided where p < 1 - confidence
    df: float = math.inf      # Student's t degrees of freedom of the interval
    se: float = math.nan      # the standard error of `difference` (resamples' and declared parts)
    why: str = ""             # why it is not decided whatever the data (NO_DECLARED_SPREAD)


@dataclass(frozen=True)
class DeclaredSpread:
    """The spread between pretraining seeds of one recipe declared for a task (noise.yaml's
    `pretraining_sd`), in the task's score units (accuracy 0..1, RMSE as is), the degrees of
    freedom of that figure (the seeds it was measured on, minus 1) and, for the verdict's noise
    line, what it is ("word_order 14.3 points, measured on 3 seeds")."""

    sd: float
    df: float
    described: str


# One arm's pretraining in a comparison of recipes: None for an arm with none to count (a
# baseline, the `none` control, or a comparison of the runs as built), else per task (in the
# order of `compare_tasks`' pairs) its declared spread, None where the task has none.
ArmPretraining = Sequence[DeclaredSpread | None] | None


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


def draw_examples(n_examples: int, resamples: int, seed: int | Sequence[int]) -> np.ndarray:
    """(resamples, n_examples) example indices drawn with replacement, shared by every arm
    (`seed`: an int or a sequence of ints, e.g. the verdicts' seed and the task's)."""
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


def compare(a: np.ndarray, b: np.ndarray, higher_is_better: bool, confidence: float, seed: int,
            declared: tuple[ArmPretraining, ArmPretraining] = (None, None)) -> Comparison:
    """Arm A against arm B on one task from their `resampled_scores` over the same example
    draws, each (fine-tuning seeds, 1 + resamples) for one pretraining seed or (pretraining
    seeds, fine-tuning seeds, 1 + resamples): `compare_tasks` of one task."""
    return compare_tasks([(a, b, higher_is_better)], confidence, seed, declared)


def compare_tasks(pairs: Sequence[tuple[np.ndarray, np.ndarray, bool]], confidence: float, seed: int,
                  declared: tuple[ArmPretraining, ArmPretraining] = (None, None)) -> Comparison:
    """Arm A against arm B on the mean over tasks of their signed differences (one task: that
    task's difference), each pair (A's scores, B's scores, higher is better) as `compare` takes
    them, every task rescored on its own example draws with the same number of resamples.

    Each resample draws, per arm, the units of its top level with more than one seed (its
    pretraining seeds, else its fine-tuning seeds) with replacement, and takes the example
    draw of the resample's column on every task. A drawn pretraining seed carries the mean of
    its fine-tuning seeds, and one draw serves every task (the same encoder is fine-tuned on
    each): the spread between pretraining seeds already holds the fine-tuning seeds' share
    (sigma_f^2 / n_f), so drawing them again would count it twice. Fine-tuning seeds, drawn
    only where an arm has one pretraining seed, are drawn per task (independent runs).
    Resampling n units with replacement shrinks their variance by (n - 1) / n; the drawn
    means' deviations from the resample's centre are scaled by sqrt(n / (n - 1)), and the
    interval is Student's t on the resamples' standard error, with the Welch-Satterthwaite
    degrees of freedom of its parts (each arm's seed part: n - 1; the examples' part: many),
    so 2-3 seeds get the wide interval they call for. Decided when the interval at
    `confidence` excludes zero, i.e. its two-sided `p` < 1 - confidence.

    Between recipes, `declared` gives each arm's pretraining (`ArmPretraining`): an arm of
    fewer than FEW_PRETRAINING_SEEDS pretraining seeds adds the declared spread of its mean
    (`declared_parts`) to the variance, with that figure's degrees of freedom in the
    Satterthwaite sum; an arm of one pretraining seed on a task without a declared spread
    leaves the comparison not decided (`why`: NO_DECLARED_SPREAD). With `(None, None)` the
    comparison is of the runs as built: conditional on their pretraining runs."""
    arms_a = [_hierarchical(a) for a, _, _ in pairs]
    arms_b = [_hierarchical(b) for _, b, _ in pairs]
    widths = {s.shape[-1] for s in arms_a + arms_b}
    if len(widths) != 1:
        raise ValueError(f"the arms were rescored on different numbers of draws ({sorted(widths)} columns)")
    resamples = widths.pop() - 1
    signs = [1.0 if higher else -1.0 for _, _, higher in pairs]
    difference = float(np.mean([sign * (a[..., 0].mean() - b[..., 0].mean())
                                for a, b, sign in zip(arms_a, arms_b, signs)]))
    rng = np.random.default_rng(seed)
    values_a, parts_a = _arm_draws(arms_a, signs, rng, resamples)
    values_b, parts_b = _arm_draws(arms_b, signs, rng, resamples)
    differences = values_a - values_b
    defined = differences[~np.isnan(differences)]
    added = declared_parts((arms_a[0].shape[0], arms_b[0].shape[0]), declared)
    noise = noise_sources(arms_a[0].shape[:2], arms_b[0].shape[:2], declared)
    if added is None:
        return Comparison(difference, math.nan, math.nan, UNDECIDED, resamples, resamples - defined.size, noise,
                          why=NO_DECLARED_SPREAD)
    if defined.size < 2 or math.isnan(difference):
        return Comparison(difference, math.nan, math.nan, UNDECIDED, resamples, resamples - defined.size, noise)
    se = math.sqrt(float(defined.var(ddof=1)) + sum(v for v, _ in added))
    df = satterthwaite(se ** 2, parts_a + parts_b + added)
    return t_interval(difference, se, df, confidence, resamples, resamples - defined.size, noise)


def t_interval(difference: float, se: float, df: float, confidence: float, resamples: int, dropped: int,
               noise: str) -> Comparison:
    """The Comparison of `difference` with standard error `se`: Student's t interval on `df`
    degrees of freedom at `confidence`, its two-sided p, and the outcome the interval decides."""
    quantile = float(stats.t.ppf(1 - (1 - confidence) / 2, df))
    low, high = difference - quantile * se, difference + quantile * se
    p = float(2 * stats.t.sf(abs(difference) / se, df)) if se > 0 else 0.0 if difference else 1.0
    outcome = A_BETTER if low > 0 else B_BETTER if high < 0 else UNDECIDED
    return Comparison(difference, low, high, outcome, resamples, dropped, noise, p, df, se)


def compare_measured(difference: float, sampling_variance: float, spreads: Sequence[DeclaredSpread | None],
                     confidence: float) -> Comparison:
    """A − B on an analysis measure (an entropy, a generation NLL) of two recipes, each measured
    on one pretraining run (the analyses measure seed 0). The measure's own sampling variance
    (`sampling_variance`: over hundreds of tokens or blocks, counted as known) says how far
    another draw of tokens would move the difference; another pretraining run of each recipe
    moves it by the spread noise.yaml declares for the measure (`spreads`, one per side), which
    is added to the variance, and the interval is Student's t on the Satterthwaite degrees of
    freedom of the declared figures. Both sides usually take one figure (the same measure on the
    same corpus): its two shares are one estimate, on that figure's degrees of freedom, not two
    independent ones. Without a declared spread for a side it is not decided (`why`:
    NO_DECLARED_SPREAD): the tokens' noise alone would read two runs as two recipes."""
    if any(spread is None for spread in spreads):
        return Comparison(difference, math.nan, math.nan, UNDECIDED, 0, 0, why=NO_DECLARED_SPREAD)
    declared = figure_parts(spreads)
    se = math.sqrt(sampling_variance + sum(v for v, _ in declared))
    df = satterthwaite(se ** 2, declared)
    return t_interval(difference, se, df, confidence, 0, 0, "; ".join(f.described for f in dict.fromkeys(spreads)))


def figure_parts(spreads: Sequence[DeclaredSpread]) -> list[tuple[float, float]]:
    """The Satterthwaite parts of sides each adding a declared spread (`one_part_per_figure`)."""
    return one_part_per_figure((spread, spread.sd ** 2, spread.df) for spread in spreads)


def one_part_per_figure(shares) -> list[tuple[float, float]]:
    """Shares (figure, variance, degrees of freedom) of declared figures as Satterthwaite parts:
    the shares of one figure (one per side that reads it) are one estimate, so one part, their
    variances summed on that figure's degrees of freedom."""
    parts: dict = {}
    for figure, variance, df in shares:
        parts[figure] = (parts.get(figure, (0.0, df))[0] + variance, df)
    return list(parts.values())


def _arm_draws(arms: list[np.ndarray], signs: list[float], rng: np.random.Generator,
               resamples: int) -> tuple[np.ndarray, list[tuple[float, int]]]:
    """One arm's signed mean over tasks in each resample (see `compare_tasks`), and the
    (variance, degrees of freedom) of its seed part for the Satterthwaite degrees of freedom."""
    pretrained = arms[0].shape[0]
    if any(s.shape[0] != pretrained for s in arms):
        raise ValueError("an arm has other pretraining seeds on some task than on another")
    if pretrained > 1:  # one draw of pretraining seeds for every task
        units = sum(sign * s.mean(axis=1) for s, sign in zip(arms, signs)) / len(arms)  # (pretraining, 1 + R)
        drawn = rng.integers(0, pretrained, size=(resamples, pretrained))
        return _inflated(units, drawn), [(_variance_of_mean(units[:, 0]), pretrained - 1)]
    values, parts = np.zeros(resamples), []
    for scores, sign in zip(arms, signs):
        units = scores[0]  # (fine-tuning seeds, 1 + R)
        tuned = units.shape[0]
        if tuned == 1:
            values = values + sign * units[0, 1:] / len(arms)
            continue
        drawn = rng.integers(0, tuned, size=(resamples, tuned))
        values = values + sign * _inflated(units, drawn) / len(arms)
        parts.append((_variance_of_mean(units[:, 0]) / len(arms) ** 2, tuned - 1))
    return values, parts


def declared_parts(pretrained: Sequence[int],
                   declared: tuple[ArmPretraining, ArmPretraining]) -> list[tuple[float, float]] | None:
    """What the arms' declared pretraining spreads add to the variance of their difference, as
    (variance, degrees of freedom) parts of the Satterthwaite sum; None where an arm's cannot be
    said (`declared_part`). Both arms' shares of the same figures (the same tasks' spreads: the
    usual case) are one estimate of one spread, their variances summed on its degrees of freedom:
    counted as two independent parts they would double those degrees of freedom and narrow the
    interval (a figure measured on 3 seeds read as t on 4 df where 2 are due)."""
    parts = [declared_part(n, spreads) for n, spreads in zip(pretrained, declared)]
    if None in parts:
        return None
    return one_part_per_figure((tuple(spreads), variance, df)
                               for spreads, (variance, df) in zip(declared, parts) if variance > 0)


def declared_part(pretrained: int, spreads: ArmPretraining) -> tuple[float, float] | None:
    """What an arm of `pretrained` pretraining seeds adds to the variance of a difference of
    recipes, and its degrees of freedom: (0, 0) where it adds nothing (no pretraining of its
    own, or FEW_PRETRAINING_SEEDS seeds or more: the drawn seeds show their spread), None where
    it cannot be said (one seed, a task without a declared spread). The spread of its mean
    over tasks is the mean of the tasks' declared spreads (one encoder is fine-tuned on every
    task: its luck taken as shared by all, correlation 1, the conservative reading), over n
    seeds sd^2 / n; its degrees of freedom, the fewest of the tasks' figures."""
    if spreads is None or pretrained >= FEW_PRETRAINING_SEEDS:
        return 0.0, 0.0
    if any(s is None for s in spreads):
        return None if pretrained == 1 else (0.0, 0.0)
    sd = sum(s.sd for s in spreads) / len(spreads)
    return sd * sd / pretrained, min(s.df for s in spreads)


def _inflated(units: np.ndarray, drawn: np.ndarray) -> np.ndarray:
    """The mean of each resample's drawn units (rows of `units`, (n, 1 + R); `drawn`, (R, n)),
    its deviation from the mean of all n units in that resample's column scaled by
    sqrt(n / (n - 1)): the bootstrap's plug-in variance (n - 1) / n * s^2 / n made s^2 / n."""
    n = units.shape[0]
    columns = np.arange(1, drawn.shape[0] + 1)
    centre = units[:, 1:].mean(axis=0)
    return centre + math.sqrt(n / (n - 1)) * (units[drawn, columns[:, None]].mean(axis=1) - centre)


def _variance_of_mean(values: np.ndarray) -> float:
    """s^2 / n of `values` (the seeds' scores on all examples)."""
    return float(np.var(values, ddof=1) / len(values))


def satterthwaite(total: float, parts: Sequence[tuple[float, int]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a variance `total` of which `parts` (variance,
    degrees of freedom) were estimated from few seeds; the rest (the examples': hundreds of
    them) counts as known. Infinite where no seed part is."""
    seeds = sum(v * v / df for v, df in parts if v > 0 and df > 0)
    return math.inf if seeds == 0 else max(min(p[1] for p in parts if p[0] > 0), total ** 2 / seeds)


def holm(pvalues: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down rule: which of a family of hypotheses are rejected with the chance of
    any false rejection at most `alpha` (the p-values in order; NaN is never rejected)."""
    order = sorted(range(len(pvalues)), key=lambda i: (math.isnan(pvalues[i]), pvalues[i]))
    rejected = [False] * len(pvalues)
    for rank, i in enumerate(order):
        if math.isnan(pvalues[i]) or pvalues[i] > alpha / (len(pvalues) - rank):
            break
        rejected[i] = True
    return rejected


def _hierarchical(scores: np.ndarray) -> np.ndarray:
    """(pretraining seeds, fine-tuning seeds, 1 + resamples): a 2-D arm is one pretraining seed."""
    return scores[None] if scores.ndim == 2 else scores


def noise_sources(a: tuple[int, int], b: tuple[int, int],
                  declared: tuple[ArmPretraining, ArmPretraining] = (None, None)) -> str:
    """Which sources of noise a comparison of arms with (pretraining, fine-tuning) seeds `a`
    and `b` covered: test examples always; fine-tuning and pretraining seeds where an arm has
    more than one (a fixed baseline has neither), resampled; and the pretraining spread
    declared for an arm of few pretraining seeds (`declared`), or that none is declared."""
    pretrained, tuned = max(a[0], b[0]), max(a[1], b[1])
    if pretrained > 1:
        text = (f"pretraining seeds ({pretrained}), each with the mean of its fine-tuning seeds ({tuned}), "
                "and test examples")
    else:
        text = f"fine-tuning seeds ({tuned}) and test examples" if tuned > 1 else "test examples"
    if all(spreads is None for spreads in declared):  # the runs as built
        return text if pretrained > 1 else f"{text}; conditional on one pretraining run per arm"
    added = [declared_part(shape[0], spreads) for shape, spreads in zip((a, b), declared)]
    if any(part is None for part in added):
        return f"{text}; {NO_DECLARED_SPREAD} for a task"
    figures = sorted({s.described for (variance, _), spreads in zip(added, declared) if variance > 0
                      for s in spreads})
    return f"{text}, and the declared pretraining spread ({'; '.join(figures)})" if figures else text


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
