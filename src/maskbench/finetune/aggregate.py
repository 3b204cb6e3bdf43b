"""Aggregate one (pretraining run, task) over fine-tuning seeds, as the papers report it.

The grid point with the best median dev score over seeds is chosen (higher or lower is better
per metric); its score on the reported split (test where the benchmark has test labels, e.g.
MoleculeNet's scaffold test; dev otherwise, as GLUE and SQuAD results are reported) is then
summarised: the median over seeds for text tasks (MAE-LM, ExLM: "median of five seeds"), mean
± std for molecules (ExLM Table 1: "mean and std over three seeds"). A task's extra evaluation
splits (MNLI mismatched) are summarised the same way at the same grid point.
"""

from __future__ import annotations

import numpy as np

from maskbench.config import task_seeds
from maskbench.eval.metrics import higher_is_better


def aggregate(config: dict, run: str, task: str, seed_metrics: dict[int, dict]) -> dict:
    spec = config["tasks"][task]
    metric, seeds = spec["metric"], task_seeds(config, task)
    if not seed_metrics:
        raise ValueError(f"no fine-tuning metrics for run {run!r} on task {task!r}")
    n_points = {len(m["grid"]) for m in seed_metrics.values()}
    if len(n_points) != 1:
        raise ValueError(f"{run}/{task}: seeds were fine-tuned over different grids ({sorted(n_points)} points)")
    sign = 1 if higher_is_better(metric) else -1

    def median_dev(point: int) -> float:
        return float(np.median([m["grid"][point]["dev"][metric] for m in seed_metrics.values()]))

    point = max(range(n_points.pop()), key=lambda p: sign * median_dev(p))
    split = "test" if all(m["grid"][point]["test"] for m in seed_metrics.values()) else "dev"
    method = "median" if spec["modality"] == "text" else "mean"

    def over_seeds(scores: dict[int, float]) -> dict:
        values = np.array(list(scores.values()), dtype=np.float64)
        return {"value": float(np.median(values) if method == "median" else np.mean(values)),
                "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
                "scores": {str(k): v for k, v in scores.items()}}

    ordered = sorted(seed_metrics.items())
    extra = {name: over_seeds({seed: m["grid"][point]["extra"][name][metric] for seed, m in ordered})
             for name in spec.get("extra_eval_splits", [])}
    return {
        "run": run, "task": task, "metric": metric, "label": spec["label"], "split": split,
        "aggregate": method,
        **over_seeds({seed: m["grid"][point][split][metric] for seed, m in ordered}),
        "extra": extra,
        "seeds_expected": len(seeds), "seeds_missing": [s for s in seeds if s not in seed_metrics],
        "grid_point": point, "settings": seed_metrics[next(iter(seed_metrics))]["grid"][point]["settings"],
        "median_dev": median_dev(point),
    }
