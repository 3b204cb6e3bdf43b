"""Aggregation over seeds and the grid (`maskbench.eval.aggregate`): the grid point chosen by the
median dev score, median or mean per the task's `aggregate`, NaN dev medians never chosen, extra
splits and `also_report` metrics at the chosen point, ROC-AUC's left-out tasks carried along."""

from __future__ import annotations

import math

import numpy as np
import pytest

from maskbench.eval.aggregate import aggregate


def seed_metrics(devs, tests, metric="accuracy"):
    """Fine-tune metrics of one seed over a grid: dev and test score per grid point."""
    return {"grid": [{"settings": {"lr": i}, "dev": {metric: d}, "test": {metric: t} if t is not None else {}}
                     for i, (d, t) in enumerate(zip(devs, tests))]}


def config_with(modality, metric="accuracy", seeds=(1, 2, 3)):
    return {"finetune": {"seeds": list(seeds)},
            "tasks": {"t": {"metric": metric, "label": "T", "modality": modality}}}


def test_aggregate_picks_grid_point_by_median_dev_and_reports_median_for_text():
    metrics = {1: seed_metrics([0.5, 0.7], [None, None]), 2: seed_metrics([0.9, 0.6], [None, None]),
               3: seed_metrics([0.4, 0.65], [None, None])}
    summary = aggregate(config_with("text"), "r", "t", metrics)
    assert summary["grid_point"] == 1  # median dev 0.65 beats 0.5
    assert summary["split"] == "dev" and summary["aggregate"] == "median" and summary["value"] == 0.65


def test_aggregate_summarises_extra_splits_at_the_chosen_point():
    def seed(devs, mismatched):
        metrics = seed_metrics(devs, [None, None])
        for point, value in zip(metrics["grid"], mismatched):
            point["extra"] = {"dev_mismatched": {"accuracy": value}}
        return metrics

    config = config_with("text")
    config["tasks"]["t"]["extra_eval_splits"] = ["dev_mismatched"]
    metrics = {1: seed([0.5, 0.7], [0.1, 0.71]), 2: seed([0.9, 0.6], [0.2, 0.62]), 3: seed([0.4, 0.65], [0.3, 0.66])}
    summary = aggregate(config, "r", "t", metrics)
    assert summary["grid_point"] == 1 and summary["value"] == 0.65
    assert summary["extra"]["dev_mismatched"]["value"] == 0.66
    assert summary["extra"]["dev_mismatched"]["scores"] == {"1": 0.71, "2": 0.62, "3": 0.66}


def test_aggregate_reports_test_mean_std_for_molecules_and_lower_rmse():
    metrics = {1: seed_metrics([1.0, 0.5], [1.1, 0.6], "rmse"), 2: seed_metrics([1.0, 0.7], [1.2, 0.8], "rmse")}
    summary = aggregate(config_with("smiles", "rmse"), "r", "t", metrics)
    assert summary["grid_point"] == 1 and summary["split"] == "test"
    assert summary["value"] == pytest.approx(0.7) and summary["std"] == pytest.approx(np.std([0.6, 0.8], ddof=1))
    assert summary["seeds_missing"] == [3]


def test_aggregate_honours_the_tasks_aggregate_key():
    """ExLM Tab. 6 reports Repeated MLM on text as the mean of 3 seeds."""
    metrics = {1: seed_metrics([0.5], [None]), 2: seed_metrics([0.6], [None]), 3: seed_metrics([0.9], [None])}
    config = config_with("text")
    assert aggregate(config, "r", "t", metrics)["value"] == 0.6
    config["tasks"]["t"]["aggregate"] = "mean"
    summary = aggregate(config, "r", "t", metrics)
    assert summary["aggregate"] == "mean" and summary["value"] == pytest.approx(2 / 3)


def test_aggregate_reports_also_report_metrics_at_the_chosen_point():
    def seed(devs, tests, f1s):
        metrics = seed_metrics(devs, tests)
        for point, f1 in zip(metrics["grid"], f1s):
            point["test"]["f1"] = f1
        return metrics

    config = config_with("text")
    config["tasks"]["t"]["also_report"] = ["f1"]
    metrics = {1: seed([0.5, 0.7], [0.5, 0.7], [0.1, 0.71]), 2: seed([0.9, 0.6], [0.9, 0.6], [0.2, 0.62]),
               3: seed([0.4, 0.65], [0.4, 0.65], [0.3, 0.66])}
    summary = aggregate(config, "r", "t", metrics)
    assert summary["grid_point"] == 1 and summary["split"] == "test"
    f1 = summary["also_report"]["f1"]
    assert f1["value"] == 0.66 and f1["scores"] == {"1": 0.71, "2": 0.62, "3": 0.66}
    assert f1["std"] == pytest.approx(np.std([0.71, 0.62, 0.66], ddof=1))

    config["tasks"]["t"]["also_report"] = ["matthews_corr"]
    with pytest.raises(ValueError, match="recorded no 'matthews_corr' on test"):
        aggregate(config, "r", "t", metrics)


@pytest.mark.parametrize("metric", ["accuracy", "rmse"])
def test_aggregate_never_picks_a_grid_point_with_a_nan_median_dev(metric):
    metrics = {s: seed_metrics([math.nan, 0.5], [0.1, 0.2], metric) for s in (1, 2, 3)}
    summary = aggregate(config_with("smiles", metric), "r", "t", metrics)
    assert summary["grid_point"] == 1 and summary["value"] == pytest.approx(0.2)


def test_aggregate_carries_roc_auc_skipped_tasks():
    metrics = {s: seed_metrics([0.7], [0.6], "roc_auc") for s in (1, 2)}
    why = "only one class present (0 positive of 5 labelled)"
    for m in metrics.values():
        m["grid"][0]["test"]["roc_auc_skipped"] = {"NR-AR": why}
        m["grid"][0]["dev"]["roc_auc_skipped"] = {}
    summary = aggregate(config_with("smiles", "roc_auc"), "r", "t", metrics)
    assert summary["roc_auc_skipped"] == {"dev": {}, "test": {"NR-AR": why}}
