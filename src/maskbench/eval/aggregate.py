"""Aggregate one (pretraining run, task) over fine-tuning seeds, as the papers report it.

The grid point with the best median dev score over seeds is chosen (higher or lower is better
per metric; a NaN median never wins); its score on the reported split (test where the
benchmark has test labels, e.g. MoleculeNet's scaffold test; dev otherwise, as GLUE and SQuAD
results are reported) is then summarised over seeds by the task's `aggregate`: by default the
median for text tasks (MAE-LM, ExLM: "median of five seeds") and the mean for molecules (ExLM
Tab. 1: "mean and std over three seeds"); ExLM Tab. 6 reports Repeated MLM on text as a mean.
The std over seeds comes with either. A task's extra evaluation splits (MNLI mismatched) and its
`also_report` metrics (SQuAD's EM beside F1) are summarised the same way at the same point.
"""

from __future__ import annotations

import numpy as np

from maskbench.config import task_seeds
from maskbench.eval.metrics import selection_key


def aggregate_method(spec: dict) -> str:
    """How a task's seeds are summarised: its `aggregate`, else median (text) or mean (molecules)."""
    return spec.get("aggregate", "median" if spec["modality"] == "text" else "mean")


def reported_metrics(spec: dict) -> list[str]:
    """The metrics a task's summary and report column show: the headline one, then `also_report`."""
    return list(dict.fromkeys([spec["metric"], *spec.get("also_report", [])]))


def over_seeds(scores: dict[int, float], method: str) -> dict:
    """The seeds' scores summarised by `method`, with their sample std."""
    values = np.array(list(scores.values()), dtype=np.float64)
    return {"value": float(np.median(values) if method == "median" else np.mean(values)),
            "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
            "scores": {str(k): v for k, v in scores.items()}}


def aggregate(config: dict, run: str, task: str, seed_metrics: dict[int, dict]) -> dict:
    spec = config["tasks"][task]
    metric, seeds = spec["metric"], task_seeds(config, task)
    if not seed_metrics:
        raise ValueError(f"no fine-tuning metrics for run {run!r} on task {task!r}")
    n_points = {len(m["grid"]) for m in seed_metrics.values()}
    if len(n_points) != 1:
        raise ValueError(f"{run}/{task}: seeds were fine-tuned over different grids ({sorted(n_points)} points)")

    def median_dev(point: int) -> float:
        # an undefined score is null in metrics.json: NaN here
        return float(np.median(np.array([m["grid"][point]["dev"][metric] for m in seed_metrics.values()],
                                        dtype=np.float64)))

    point = max(range(n_points.pop()), key=lambda p: selection_key(metric, median_dev(p)))
    chosen = {seed: m["grid"][point] for seed, m in sorted(seed_metrics.items())}
    split = "test" if all(entry["test"] for entry in chosen.values()) else "dev"
    method = aggregate_method(spec)

    def summarise(name: str) -> dict:
        _require_recorded(run, task, name, chosen, split)
        return {**over_seeds({seed: entry[split][name] for seed, entry in chosen.items()}, method),
                "extra": {extra: over_seeds({seed: entry["extra"][extra][name] for seed, entry in chosen.items()},
                                            method)
                          for extra in spec.get("extra_eval_splits", [])}}

    return {
        "run": run, "task": task, "metric": metric, "label": spec["label"], "split": split,
        "aggregate": method,
        **summarise(metric),
        "also_report": {name: summarise(name) for name in reported_metrics(spec)[1:]},
        "roc_auc_skipped": _skipped_tasks(chosen.values()),
        "seeds_expected": len(seeds), "seeds_missing": [s for s in seeds if s not in seed_metrics],
        "grid_point": point, "settings": next(iter(chosen.values()))["settings"],
        "median_dev": median_dev(point),
    }


def _require_recorded(run: str, task: str, name: str, chosen: dict[int, dict], split: str) -> None:
    """A clear error for an `also_report` metric fine-tuning did not record (binary F1 on a
    three-class task, EM on a classification task)."""
    for seed, entry in chosen.items():
        if name not in entry[split]:
            recorded = sorted(entry[split])
            raise ValueError(f"tasks.{task}: {run} seed {seed} recorded no {name!r} on {split} "
                             f"(it recorded {recorded}); list only these in also_report")


def skipped_by_split(point: dict) -> dict[str, dict[str, str]]:
    """The tasks ROC-AUC left out of its mean (and why), per split scored at one grid point
    (a `metrics.json` grid entry); empty for metrics other than ROC-AUC."""
    scored = {"dev": point["dev"], "test": point["test"], **point.get("extra", {})}
    return {split: scores["roc_auc_skipped"] for split, scores in scored.items() if "roc_auc_skipped" in scores}


def _skipped_tasks(points) -> dict[str, dict[str, str]]:
    """Per split, the tasks ROC-AUC left out over seeds: they depend on the labels only, so
    every seed names the same ones; their union is kept all the same."""
    union: dict[str, dict[str, str]] = {}
    for point in points:
        for split, skipped in skipped_by_split(point).items():
            union.setdefault(split, {}).update(skipped)
    return union


def over_pretraining_seeds(summaries: dict[str, dict]) -> dict:
    """One declared run's summaries on a task, one per pretraining seed (instance name ->
    `aggregate`'s summary), as one summary: each score the mean over pretraining seeds of the
    seeds' own summaries (each the task's aggregate over its fine-tuning seeds), its `std` the
    fine-tuning std pooled over pretraining seeds (the root mean square), and `pretraining`
    their spread: each seed's headline value and their sample std. One summary is returned as is."""
    if len(summaries) == 1:
        return next(iter(summaries.values()))
    first = next(iter(summaries.values()))

    def combine(parts: list[dict]) -> dict:
        values = np.array([p["value"] for p in parts], dtype=np.float64)
        return {"value": float(values.mean()), "std": float(np.sqrt(np.mean([p["std"] ** 2 for p in parts]))),
                "scores": {f"{run}/{seed}": v for run, p in zip(summaries, parts) for seed, v in p["scores"].items()},
                "extra": {name: combine([p["extra"][name] for p in parts]) for name in parts[0].get("extra", {})}}

    parts = list(summaries.values())
    values = [p["value"] for p in parts]
    return {**first, **combine(parts),
            "also_report": {name: combine([p["also_report"][name] for p in parts]) for name in first["also_report"]},
            "seeds_expected": sum(p["seeds_expected"] for p in parts),
            "seeds_missing": [f"{run}/{seed}" for run, p in summaries.items() for seed in p["seeds_missing"]],
            "pretraining": {"runs": list(summaries), "values": values,
                            "std": float(np.std(np.array(values, dtype=np.float64), ddof=1))}}
