"""benchmarks/gpu_suite.py --dry: the GPU suite's whole plan on the CPU, so that a lent GPU's
minutes go to measuring, not to debugging the script."""

import json
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO

RUNS = ("mlm", "varlen_mlm", "repeated_mlm", "mae_lm", "exlm", "ar", "dar")


@pytest.mark.slow  # about a minute: seven pretraining runs, a fine-tuning and a probe
def test_dry_run_reports_every_part(tmp_path):
    out = tmp_path / "suite.json"
    done = subprocess.run([sys.executable, "benchmarks/gpu_suite.py", "--dry", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "dry" and report["failed"] == []
    assert {"device", "torch", "cuda", "cupy", "git_commit"} <= set(report)
    parts = report["parts"]
    assert set(parts) == {"gpu_tests", "align", "objectives", "ddp", "finetune", "probe",
                          *(f"pretrain/{run}" for run in RUNS)}
    tests = parts["gpu_tests"]["figures"]
    assert "failed" not in tests and tests.get("skipped", 0) + tests.get("passed", 0) > 0
    if not torch.cuda.is_available():  # collected, and skipped for want of a device
        assert tests.get("passed", 0) == 0
    for name in ("align", "objectives", "ddp"):  # CUDA only: skipped, their commands built and shown
        assert parts[name]["status"] == "skipped" and parts[name]["reason"] == "no CUDA (--dry)"
        assert "benchmarks/bench_" in parts[name]["command"] and parts[name]["command"] in done.stdout
    for run in RUNS:
        figures = parts[f"pretrain/{run}"]["figures"]
        assert parts[f"pretrain/{run}"]["status"] == "passed" and figures["steps"] == 5
        assert figures["align_backend"] == ("reference" if run == "exlm" else None)
    assert parts["finetune"]["figures"]["metric"] == "accuracy"
    assert parts["probe"]["status"] == "passed" and parts["probe"]["figures"]["best_layer"] >= 0


def test_a_part_that_fails_or_overruns_stops_only_itself(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    from gpu_suite import Suite

    suite = Suite(budget_s=60, dry=True)
    assert not suite.run("fails", [sys.executable, "-c", "raise SystemExit(3)"], 10)
    assert not suite.run("slow", [sys.executable, "-c", "import time; time.sleep(5)"], 1)
    assert suite.run("fine", [sys.executable, "-c", "print('4 passed')"], 10, figures=lambda out: out.strip())
    assert suite.parts["fails"]["reason"] == "exit status 3"
    assert suite.parts["slow"]["reason"] == "timed out after 1 s"
    assert suite.parts["fine"]["status"] == "passed" and suite.parts["fine"]["figures"] == "4 passed"
