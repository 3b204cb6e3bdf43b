"""Downstream metrics as the papers report them, keyed by the names params.yaml uses.

`score(metric, labels, outputs)` takes the model outputs fine-tuning produces: class
probabilities (N, C) for classification, values (N,) for regression, per-task probabilities
(N, T) for multi-task classification (labels (N, T) with NaN where a molecule has no label).
Each metric knows whether higher is better, so model selection on dev can use any of them, and
`selection_key` ranks an undefined (NaN) score below every number, so a NaN never wins.
SQuAD 2.0 EM/F1 are computed from answer strings by `maskbench.eval.squad`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score, matthews_corrcoef


def roc_auc(y_true, y_score):
    """ROC-AUC of binary labels (0/1; NaN: no label, left out) against scores, by the
    Mann-Whitney U statistic with ties given their average rank: equal to
    `sklearn.metrics.roc_auc_score` on the labelled entries, and tens of times faster on the
    small arrays the bootstrap rescores thousands of times. NaN where one class is absent
    (sklearn raises there).

    Leading dimensions (..., N) score every row at once (an array of AUCs: the tasks of a
    multi-task set, the resamples of a bootstrap); a single row gives a float."""
    y_true = np.asarray(y_true, dtype=np.float64)
    y_score = np.asarray(y_score, dtype=np.float64)
    if y_true.shape != y_score.shape:
        raise ValueError(f"y_true has shape {y_true.shape} but y_score has shape {y_score.shape}")
    n = y_score.shape[-1] if y_score.ndim else 0
    if n == 0:  # no examples: no AUC
        empty = np.full(y_score.shape[:-1], np.nan)
        return float(empty) if empty.ndim == 0 else empty
    rows_true, rows_score = y_true.reshape(-1, n), y_score.reshape(-1, n)
    unlabelled = np.isnan(rows_true)
    order = np.lexsort((rows_score, unlabelled), axis=-1)  # by score, the unlabelled after every labelled
    ordered = np.take_along_axis(rows_score, order, axis=-1)
    ordered_unlabelled = np.take_along_axis(unlabelled, order, axis=-1)
    positive = np.take_along_axis(rows_true == 1, order, axis=-1)
    # runs of equal scores, numbered over all rows (each row, and its unlabelled tail, starts a new run)
    starts = np.ones(ordered.shape, dtype=bool)
    starts[:, 1:] = (ordered[:, 1:] != ordered[:, :-1]) | (ordered_unlabelled[:, 1:] != ordered_unlabelled[:, :-1])
    run = np.cumsum(starts.ravel()) - 1
    first = np.flatnonzero(starts.ravel())
    length = np.diff(np.append(first, starts.size))
    average_rank = first % n + (length + 1) / 2  # 1-based rank among the labelled, averaged over the run
    rank_sum = np.where(positive.ravel(), average_rank[run], 0.0).reshape(-1, n).sum(axis=-1)
    positives = positive.sum(axis=-1)
    negatives = (~unlabelled).sum(axis=-1) - positives
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)
    auc = np.where((positives == 0) | (negatives == 0), np.nan, auc).reshape(y_score.shape[:-1])
    return float(auc) if auc.ndim == 0 else auc


def mean_roc_auc(y_true, y_score):
    """The mean over tasks (the last axis) of each task's ROC-AUC on its labelled molecules,
    tasks without both classes left out (NaN if none has both): `roc_auc_per_task(...).mean`,
    for any leading dimensions (..., N, T) at once."""
    per_task = roc_auc(np.swapaxes(np.asarray(y_true, dtype=np.float64), -1, -2),
                       np.swapaxes(np.asarray(y_score, dtype=np.float64), -1, -2))
    defined = ~np.isnan(per_task)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(defined, per_task, 0.0).sum(axis=-1) / defined.sum(axis=-1)
    return float(mean) if np.ndim(mean) == 0 else mean


@dataclass
class TaskAucs:
    """ROC-AUC per task, and the tasks left out of the mean with the reason why."""

    per_task: dict[str, float]
    skipped: dict[str, str]

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.per_task.values()))) if self.per_task else math.nan


def roc_auc_per_task(y_true, y_score, task_names: Sequence[str] | None = None) -> TaskAucs:
    """ROC-AUC of every task over the molecules that have a label for it (NaN labels masked).

    A task whose split holds no labels, or labels of only one class, has no ROC-AUC; it is
    reported in ``skipped`` with counts, not silently dropped from the mean."""
    y_true = np.asarray(y_true, dtype=np.float64)
    y_score = np.asarray(y_score, dtype=np.float64)
    if y_true.ndim == 1:
        y_true, y_score = y_true[:, None], y_score[:, None]
    if y_true.shape != y_score.shape:
        raise ValueError(f"y_true has shape {y_true.shape} but y_score has shape {y_score.shape}")
    names = list(task_names) if task_names is not None else [str(t) for t in range(y_true.shape[1])]
    if len(names) != y_true.shape[1]:
        raise ValueError(f"{len(names)} task names for {y_true.shape[1]} tasks")

    result = TaskAucs(per_task={}, skipped={})
    for t, name in enumerate(names):
        labelled = ~np.isnan(y_true[:, t])
        truth = y_true[labelled, t]
        positives = int(truth.sum())
        if truth.size == 0:
            result.skipped[name] = "no labelled molecules in this split"
        elif positives in (0, truth.size):
            result.skipped[name] = f"only one class present ({positives} positive of {truth.size} labelled)"
        else:
            result.per_task[name] = roc_auc(truth, y_score[labelled, t])
    return result


def rmse(y_true, y_pred) -> float:
    """Root-mean-square error over the labelled entries (NaN labels masked)."""
    y_true = np.asarray(y_true, dtype=np.float64)
    y_pred = np.asarray(y_pred, dtype=np.float64)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true has shape {y_true.shape} but y_pred has shape {y_pred.shape}")
    labelled = ~np.isnan(y_true)
    if not labelled.any():
        raise ValueError("rmse needs at least one labelled entry")
    return float(np.sqrt(np.mean((y_true[labelled] - y_pred[labelled]) ** 2)))


@dataclass(frozen=True)
class Metric:
    fn: Callable[[np.ndarray, np.ndarray], float]
    higher_is_better: bool = True


def _classes(outputs: np.ndarray) -> np.ndarray:
    return np.asarray(outputs).argmax(-1)


def _labelled(fn: Callable[[np.ndarray, np.ndarray], float]) -> Callable[[np.ndarray, np.ndarray], float]:
    """Score only the rows with a label: molecule regression sets have missing (NaN) labels."""
    def masked(y: np.ndarray, p: np.ndarray) -> float:
        known = ~np.isnan(np.asarray(y, dtype=np.float64))
        return fn(y[known], np.asarray(p)[known])
    return masked


METRICS: dict[str, Metric] = {
    "accuracy": Metric(lambda y, p: float(np.mean(y == _classes(p)))),
    "matthews_corr": Metric(lambda y, p: float(matthews_corrcoef(y, _classes(p)))),
    "f1": Metric(lambda y, p: float(f1_score(y, _classes(p)))),
    "pearson": Metric(_labelled(lambda y, p: float(pearsonr(p, y)[0]))),
    "spearman": Metric(_labelled(lambda y, p: float(spearmanr(p, y)[0]))),
    "rmse": Metric(lambda y, p: rmse(y, p), higher_is_better=False),
    "roc_auc": Metric(lambda y, p: mean_roc_auc(*(a[:, None] if a.ndim == 1 else a for a in (y, p)))),
}

# Computed from answer strings by `maskbench.finetune.qa`, not from output arrays.
SPAN_METRICS = ("squad_v2_f1", "squad_v2_exact")

# Every metric fine-tuning records for a task kind: the headline one is among them, and a task's
# `also_report` may name any of them (the papers' tables show these beside the headline).
KIND_METRICS = {
    "classification": ("accuracy", "f1", "matthews_corr"),
    "regression": ("pearson", "spearman", "rmse"),
    "multitask_classification": ("roc_auc",),
    "qa": SPAN_METRICS,
}


# How figures and tables name each metric (the keys are params.yaml's and the files').
LABELS = {
    "accuracy": "accuracy",
    "matthews_corr": "Matthews correlation",
    "f1": "F1",
    "pearson": "Pearson r",
    "spearman": "Spearman ρ",
    "rmse": "RMSE",
    "roc_auc": "ROC-AUC",
    "squad_v2_f1": "F1",  # the SQuAD 2.0 column's names, as the papers write them
    "squad_v2_exact": "EM",
}


def metric_label(metric: str) -> str:
    """The metric's name for a reader ("ROC-AUC" for `roc_auc`); an unlisted key as is."""
    return LABELS.get(metric, metric)


def score(metric: str, labels, outputs) -> float:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {sorted(METRICS)}")
    return METRICS[metric].fn(np.asarray(labels), np.asarray(outputs))


def recorded_metrics(kind: str, n_outputs: int) -> tuple[str, ...]:
    """The metrics fine-tuning records for this kind; binary F1 only for two-class outputs."""
    names = KIND_METRICS[kind]
    return tuple(n for n in names if n != "f1") if kind == "classification" and n_outputs != 2 else names


def all_scores(kind: str, metric: str, labels, outputs) -> dict[str, float]:
    """The headline metric first, then every other metric recorded for the kind."""
    names = dict.fromkeys([metric, *recorded_metrics(kind, np.asarray(outputs).shape[-1])])
    return {name: score(name, labels, outputs) for name in names}


def roc_auc_skipped(labels, outputs, task_names: list[str] | None) -> dict[str, str]:
    """Tasks left out of the ROC-AUC mean (no labels, or one class only) and why: a mean over
    fewer tasks than the dataset has must say so."""
    return roc_auc_per_task(labels, outputs, task_names).skipped


def higher_is_better(metric: str) -> bool:
    if metric in SPAN_METRICS:
        return True
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {sorted(METRICS) + list(SPAN_METRICS)}")
    return METRICS[metric].higher_is_better


def undefined(value: float | None) -> bool:
    """An undefined score: NaN in memory, null once written to JSON (which has no NaN)."""
    return value is None or math.isnan(value)


def selection_key(metric: str, value: float | None) -> float:
    """What model selection maximises: the score signed so that larger is better, and −inf for
    an undefined (NaN or null) score, which `>` and `max` would otherwise treat inconsistently."""
    if undefined(value):
        return -math.inf
    return value if higher_is_better(metric) else -value
