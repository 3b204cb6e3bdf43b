"""benchmarks/learning_failures.py, whose records docs/learning-failures.md cites: it trains a run
as `maskbench pretrain` does, from a workflow copy whose data stages have run, and measures the
validation loss, the spread of the encoder's outputs and (ExLM) the alignment at the steps asked."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, pretrain_workdir


@pytest.mark.slow
@pytest.mark.parametrize("run, knobs", [("mlm", []), ("exlm", []), ("exlm", ["--set", "runs.exlm.knobs.transitions=ctc"])])
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
