"""Linear models on fixed features, their regularisation chosen on dev: what the ECFP
baselines and the frozen-encoder probes fit.

Classification: scikit-learn LogisticRegression over the grid `controls.C`, class
probabilities (N, C) over every class of the task (a class absent from train gets 0).
Multi-task classification (MoleculeNet): one LogisticRegression per task on the molecules
labelled for it, sharing one C; a task with one class only in train predicts its train
positive rate. Regression: Ridge over the grid `controls.alpha`, on the labelled rows. The
grid point with the best headline score on dev wins (an undefined score never does), as
fine-tuning's epochs and grid points are chosen.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, Ridge

from maskbench.eval.metrics import score, selection_key


@dataclass
class Fit:
    """A fitted linear model: the grid point chosen on dev, its dev score and outputs per split."""

    chosen: dict
    dev: float
    outputs: dict[str, np.ndarray]


def fit_on_dev(kind: str, metric: str, x: dict[str, np.ndarray], y: dict[str, np.ndarray], controls: dict,
               n_classes: int | None = None) -> Fit:
    """Fit on x["train"] for every grid point, keep the best on dev, return its outputs on every
    split of `x`. `n_classes`: the task's classes (classification)."""
    name = "alpha" if kind == "regression" else "C"
    best = None
    for value in controls[name]:
        models = _fit(kind, value, x["train"], y["train"], controls["max_iter"])
        dev = score(metric, y["dev"], _predict(kind, models, x["dev"], n_classes))
        if best is None or selection_key(metric, dev) > selection_key(metric, best[1]):
            best = (value, dev, models)
    value, dev, models = best
    return Fit({name: value}, dev,
               {split: _predict(kind, models, features, n_classes) for split, features in x.items()})


def _fit(kind: str, value: float, x: np.ndarray, y: np.ndarray, max_iter: int):
    with warnings.catch_warnings():  # a grid point that has not converged is judged on dev like any other
        warnings.simplefilter("ignore", ConvergenceWarning)
        if kind == "regression":
            known = ~np.isnan(y)
            return Ridge(alpha=value).fit(x[known], y[known])
        if kind == "classification":
            return LogisticRegression(C=value, max_iter=max_iter).fit(x, y.astype(int))
        models = []
        for t in range(y.shape[1]):
            known = ~np.isnan(y[:, t])
            labels = y[known, t].astype(int)
            if len(np.unique(labels)) < 2:  # nothing to separate: the train positive rate
                models.append(float(labels.mean()) if labels.size else 0.5)
            else:
                models.append(LogisticRegression(C=value, max_iter=max_iter).fit(x[known], labels))
        return models


def _predict(kind: str, models, x: np.ndarray, n_classes: int | None) -> np.ndarray:
    if kind == "regression":
        return models.predict(x)
    if kind == "classification":
        probabilities = np.zeros((len(x), n_classes))
        probabilities[:, models.classes_] = models.predict_proba(x)
        return probabilities
    return np.stack([np.full(len(x), m) if isinstance(m, float) else m.predict_proba(x)[:, 1] for m in models],
                    axis=1)
