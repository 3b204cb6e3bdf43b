"""Task metrics. `score(metric, labels, predictions)` takes the model's outputs as produced by
fine-tuning: class probabilities (N, C) for classification, values (N,) for regression."""

from __future__ import annotations

import numpy as np


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
    return float(np.mean(np.asarray(labels) == np.asarray(predictions).argmax(-1)))


METRICS = {"accuracy": accuracy}


def score(metric: str, labels, predictions) -> float:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {sorted(METRICS)}")
    return METRICS[metric](np.asarray(labels), np.asarray(predictions))
