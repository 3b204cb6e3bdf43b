"""Downstream metrics as the papers report them, keyed by the names params.yaml uses.

`score(metric, labels, outputs)` takes the model outputs fine-tuning produces: class
probabilities (N, C) for classification, values (N,) for regression, per-task probabilities
(N, T) for multi-task classification (labels (N, T) with NaN where a molecule has no label).
Each metric knows whether higher is better, so model selection on dev can use any of them.
SQuAD 2.0 EM/F1 are computed from answer strings in `maskbench.finetune.qa`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score, matthews_corrcoef

from maskbench.data.moleculenet import rmse, roc_auc_per_task


@dataclass(frozen=True)
class Metric:
    fn: Callable[[np.ndarray, np.ndarray], float]
    higher_is_better: bool = True


def _classes(outputs: np.ndarray) -> np.ndarray:
    return np.asarray(outputs).argmax(-1)


METRICS: dict[str, Metric] = {
    "accuracy": Metric(lambda y, p: float(np.mean(y == _classes(p)))),
    "matthews_corr": Metric(lambda y, p: float(matthews_corrcoef(y, _classes(p)))),
    "f1": Metric(lambda y, p: float(f1_score(y, _classes(p)))),
    "pearson": Metric(lambda y, p: float(pearsonr(p, y)[0])),
    "spearman": Metric(lambda y, p: float(spearmanr(p, y)[0])),
    "rmse": Metric(lambda y, p: rmse(y, p), higher_is_better=False),
    "roc_auc": Metric(lambda y, p: roc_auc_per_task(y, p).mean),
}

# What else is worth recording beside a task's headline metric (the papers' tables show these).
COMPANIONS = {
    "classification": ("accuracy", "f1", "matthews_corr"),
    "regression": ("pearson", "spearman", "rmse"),
    "multitask_classification": ("roc_auc",),
}


def score(metric: str, labels, outputs) -> float:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {sorted(METRICS)}")
    return METRICS[metric].fn(np.asarray(labels), np.asarray(outputs))


def all_scores(kind: str, metric: str, labels, outputs) -> dict[str, float]:
    """The headline metric and its companions; binary F1 only for two-class outputs."""
    names = [metric, *COMPANIONS.get(kind, ())]
    if kind == "classification" and np.asarray(outputs).shape[-1] != 2:
        names = [n for n in names if n != "f1"]
    return {name: score(name, labels, outputs) for name in dict.fromkeys(names)}


# Computed from answer strings by `maskbench.finetune.qa`, not from output arrays.
SPAN_METRICS = ("squad_v2_f1", "squad_v2_exact")


def higher_is_better(metric: str) -> bool:
    if metric in SPAN_METRICS:
        return True
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {sorted(METRICS) + list(SPAN_METRICS)}")
    return METRICS[metric].higher_is_better
