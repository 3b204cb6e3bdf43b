"""The report's tables (`maskbench.report.tables`): cells show the spread and the seeds missing,
undefined scores are explained, MNLI's matched/mismatched and `also_report` metrics sit beside the
headline, headers name the aggregate, and `render` reads the summaries."""

from __future__ import annotations

import math

from maskbench.config import read_yaml, schema_path, validate
from maskbench.report.tables import cell, column_header, render
from tests.conftest import REPO, table_summaries, write_summary


def summary(value, std=0.0, aggregate="median", missing=(), metric="accuracy"):
    return {"value": value, "std": std, "aggregate": aggregate, "seeds_expected": 3, "seeds_missing": list(missing),
            "metric": metric, "split": "test"}


def test_cells_show_the_spread_and_say_what_was_not_computed():
    assert cell(None, True) == "not computed"
    assert cell(summary(0.5), False) == "—"
    assert cell(summary(0.9, 0.012), True) == "90.0 ± 1.2"
    assert cell(summary(0.9, 0.1, "mean"), True) == "90.0 ± 10.0"
    assert cell(summary(0.9, missing=[3]), True) == "90.0 ± 0.0 (2/3 seeds)"
    assert cell(summary(0.512, 0.01, "mean", metric="rmse"), True) == "0.512 ± 0.010"


def test_undefined_scores_are_explained_not_shown_as_nan():
    roc = summary(math.nan, math.nan, "mean", metric="roc_auc")
    assert cell(roc, True) == "not computed (no task has both classes on test)"
    assert cell(summary(math.nan, metric="pearson"), True) == "not computed (pearson is undefined (NaN) on test)"


def test_mnli_cells_show_matched_then_mismatched(raw_params):
    mnli = {**summary(0.842), "split": "dev", "extra": {"dev_mismatched": {"value": 0.845, "std": 0.0}}}
    assert cell(mnli, True) == "84.2 ± 0.0 / 84.5 ± 0.0"
    raw_params["profile"] = "paper"
    config = validate(raw_params, read_yaml(schema_path(REPO / "params.yaml")))
    assert (column_header(config, "mnli", mnli)
            == "MNLI-m/mm (GLUE) — accuracy, dev / dev_mismatched, median ± std of 5 seeds")


def test_also_report_metrics_follow_the_headline(raw_params):
    squad = {**summary(0.815, 0.003, metric="squad_v2_f1"), "split": "dev",
             "also_report": {"squad_v2_exact": {"value": 0.783, "std": 0.004, "extra": {}}}}
    assert cell(squad, True) == "81.5 ± 0.3 / 78.3 ± 0.4"
    raw_params["profile"] = "paper"
    raw_params["profiles"]["paper"]["tasks"]["squad_v2"]["also_report"] = ["squad_v2_exact"]
    config = validate(raw_params, read_yaml(schema_path(REPO / "params.yaml")))
    assert (column_header(config, "squad_v2", squad)
            == "SQuAD 2.0 — squad_v2_f1 / squad_v2_exact, dev, median ± std of 5 seeds")


def test_header_names_the_tasks_aggregate(raw_params):
    raw_params["tasks"]["rotten_tomatoes"]["aggregate"] = "mean"
    config = validate(raw_params, read_yaml(schema_path(REPO / "params.yaml")))
    assert column_header(config, "rotten_tomatoes", None).endswith("accuracy, ?, mean ± std of 3 seeds")


def test_render_reads_summaries(tmp_path, raw_params):
    config = validate(raw_params, read_yaml(schema_path(REPO / "params.yaml")))
    write_summary(tmp_path, "mlm", "rotten_tomatoes", summary(0.8, 0.02))
    text = render(config, "table1", table_summaries(config, "table1", tmp_path))
    assert "| mlm | mlm | 80.0 ± 2.0 |" in text
    assert ("Rotten Tomatoes (sentiment; SST-2 stand-in) — accuracy, test, median ± std of 3 seeds" in text
            and "params hash" in text)
