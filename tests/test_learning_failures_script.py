"""The scripts behind docs/learning-failures.md: benchmarks/learning_failures.py trains a run as
`maskbench pretrain` does, from a workflow copy whose data stages have run, and measures the
validation loss, the spread of the encoder's outputs and (ExLM) the alignment at the steps asked;
benchmarks/learning_table.py lists which arms of a workspace learned."""

from __future__ import annotations

import json
import math
import os
import runpy
import subprocess
import sys

import pytest
import yaml

from tests.helpers import REPO, pretrain_workdir, write_params


@pytest.mark.slow
@pytest.mark.parametrize("run, knobs",
                         [("mlm", []), ("exlm", []), ("exlm", ["--set", "runs.exlm.knobs.transitions=ctc"])])
def test_the_script_trains_a_run_and_measures_it_at_the_steps_asked(tmp_path, tiny_tokenizer, run, knobs):
    root = pretrain_workdir(tmp_path / "w", tiny_tokenizer, eval_blocks=4)
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks/learning_failures.py"), "--run", run,
                           "--set", "pretrain.lr=0.002", *knobs, "--at", "0", "2", "--out", str(out)],
                          cwd=root, env={**os.environ, "PYTHONPATH": str(REPO / "src")}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    assert record["set"] == ["pretrain.lr=0.002", *knobs[1:]]
    rows = record["rows"]
    assert [row["step"] for row in rows] == [0, 2]
    assert all(math.isfinite(row["valid_loss"]) and 0.0 <= row["centred_norm"] <= 1.0 for row in rows)
    assert rows[0]["valid_loss"] != rows[1]["valid_loss"]  # two optimizer steps were taken between them
    if run == "exlm" and not knobs:  # the alignment of the DAG; per-mask CTC has none
        assert all(0.0 <= row["own_posterior"] <= 1.0 for row in rows)


def test_the_learning_table_names_every_arm_and_the_ones_on_the_plateau(tmp_path, monkeypatch, capsys):
    """benchmarks/learning_table.py: each pretrained arm of the profile's tables with its gap on
    the validation masks and, where the analysis ran, on its own masks; "(plateau)" under
    verdicts.learned_gap; "not built" where the run has no metrics; ExLM's DAG on its own masks
    against the unigram loss plus its transition floor."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["profile"] = "smoke"
    write_params(tmp_path, params)
    for run, gap in {"mlm": 0.5, "smiles_mlm": 0.02, "smiles_exlm": -0.8}.items():
        (tmp_path / f"runs/pretrain/{run}").mkdir(parents=True)
        (tmp_path / f"runs/pretrain/{run}/metrics.json").write_text(
            json.dumps({"unigram_gap": gap, "unigram_loss": 2.3, "valid_loss": 2.3 - gap, "valid_loss_floor": 0.0}))
    (tmp_path / "runs/analysis/smiles_mlm").mkdir(parents=True)
    (tmp_path / "runs/analysis/smiles_mlm/entropy.json").write_text(json.dumps({"applies": True, "nll": 2.0}))
    (tmp_path / "runs/analysis/smiles_exlm").mkdir(parents=True)
    (tmp_path / "runs/analysis/smiles_exlm/alignment.json").write_text(
        json.dumps({"applies": True, "dag_nll": 3.1, "transition_floor": 1.2}))
    monkeypatch.chdir(tmp_path)  # the script as run from the workspace, in this process (its imports made)
    runpy.run_path(str(REPO / "benchmarks/learning_table.py"), run_name="__main__")
    out = capsys.readouterr().out
    lines = {line.split(" | ")[0].strip("| `"): line for line in out.splitlines() if line.startswith("| `")}
    assert lines["mlm"].endswith("| 0.50 | not measured |")
    assert lines["smiles_mlm"].endswith("| 0.02 (plateau) | 0.30 |")  # 2.3 - 2.0 on its own masks
    assert lines["smiles_exlm"].endswith("| -0.80 (plateau) | 0.40 |")  # 2.3 + 1.2 - 3.1
    assert "not built" in lines["smiles_mae_lm_t5"]
