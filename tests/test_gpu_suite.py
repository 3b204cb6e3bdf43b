"""benchmarks/gpu_suite.py: a plan that fits the lease, parts that stop at their budget and keep
what they measured, records that survive a killed suite, and the device twin (its dry run of
every part where only the lent machine's packages and the carried wheels are installed)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_suite  # noqa: E402


def test_plan_fits_the_lease_and_lists_every_part():
    done = subprocess.run([sys.executable, "benchmarks/gpu_suite.py", "--plan"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    budgets = [gpu_suite.SETUP.budget_s, *(p.budget_s for p in gpu_suite.PARTS)]
    assert sum(budgets) <= gpu_suite.LEASE_S == 480
    assert f"total {sum(budgets)} s" in done.stdout
    assert [p.letter for p in gpu_suite.PARTS] == list("abcdef")
    for part in gpu_suite.PARTS:
        assert f"{part.letter} {part.name}" in done.stdout
    selected = subprocess.run([sys.executable, "benchmarks/gpu_suite.py", "--plan", "--parts", "a,d"], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    assert "b steps" not in selected.stdout and "d pretrain" in selected.stdout
    wrong = subprocess.run([sys.executable, "benchmarks/gpu_suite.py", "--plan", "--parts", "a,x"], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and "unknown x" in wrong.stderr


class ScriptedSuite(gpu_suite.Suite):
    """A suite whose parts run `scripts[letter]` (Python) instead of gpu_parts.py."""

    def __init__(self, out, scripts):
        super().__init__(out, dry=True, env={}, common={"mode": "dry", "started": "now", "git_commit": "x"})
        self.scripts = scripts

    def command(self, part, budget, progress):
        return [sys.executable, "-c", self.scripts[part.letter], str(progress)]


WRITES_THEN_SLEEPS = ("import json, sys, time; open(sys.argv[1], 'w').write(json.dumps({'first': 1})); "
                      "print('measured first', flush=True); time.sleep(60)")


def test_a_part_over_its_budget_is_stopped_keeping_its_figures_and_a_failing_part_ends_only_itself(tmp_path):
    slow = gpu_suite.Part("a", "slow", "nothing", 2, 2)
    failing = gpu_suite.Part("b", "failing", "nothing", 30, 30)
    fine = gpu_suite.Part("c", "fine", "nothing", 30, 30)
    suite = ScriptedSuite(tmp_path, {"a": WRITES_THEN_SLEEPS, "b": "raise SystemExit(3)",
                                     "c": "import json, sys; open(sys.argv[1], 'w').write(json.dumps({'x': 2}))"})
    tick = time.monotonic()
    records = [suite.run_part(part) for part in (slow, failing, fine)]
    assert time.monotonic() - tick < 30  # the sleeping part was stopped at its 2 s, not after 60
    assert records[0]["status"] == "failed" and "stopped at its budget of 2 s" in records[0]["reason"]
    assert records[0]["figures"] == {"first": 1} and "measured first" in records[0]["output_tail"]
    assert records[1]["status"] == "failed" and records[1]["reason"] == "exit status 3"
    assert records[2]["status"] == "passed" and records[2]["figures"] == {"x": 2}
    for letter, record in zip("abc", records):  # each written as its part ended
        assert json.loads((tmp_path / f"part-{letter}.json").read_text()) == record
    summary = (tmp_path / "summary.md").read_text()
    assert "## a slow: failed" in summary and "## c fine: passed" in summary


def test_summary_marks_dry_runs_and_what_was_not_measured():
    steps = {"settings": {"size": "tiny", "batch": 4, "seq_len": 32, "vocab": 600, "compiled": False,
                          "peak_bf16_tflops": None},
             "mlm": {"tokens_per_s": 100, "step_ms": 1.0, "tflop_per_s": 0.1, "mfu": None, "peak_memory_gib": None,
                     "agreement": {"max_rel_diff": 0.001}},
             "left_out_for_budget": ["ar"]}
    records = {"part-b": {"part": "b", "name": "steps", "status": "passed", "mode": "dry", "figures": steps}}
    text = gpu_suite.summary(records)
    assert "DRY RUN" in text
    row = next(line for line in text.splitlines() if line.startswith("| mlm"))
    assert row.count("not measured") == 2 and "0.10%" in row
    assert "Left out for lack of budget: ar." in text


def wait_for(path: Path, process: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, "the suite ended before its first part did"
        assert time.monotonic() < deadline, f"{path} did not appear in {seconds} s"
        time.sleep(0.5)


@pytest.mark.slow  # about a minute: part a of the dry run, then part b until killed
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_suite_keeps_every_finished_part(tmp_path, sig):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    process = subprocess.Popen([sys.executable, "benchmarks/gpu_suite.py", "--dry", "--parts", "a,b", "--out",
                                str(out)], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        wait_for(out / "part-a.json", process, 600)
        time.sleep(2)  # part b under way
        if sig == signal.SIGKILL:  # the suite and its part's process, with no chance to write anything
            os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    part_a = json.loads((out / "part-a.json").read_text())
    assert part_a["status"] == "passed" and part_a["mode"] == "dry"
    # the host twin's float32 offsets from one float64 scale per step: the exactness tests' 1e-4 relative
    assert part_a["figures"]["tiny"]["error"]["log_z"]["max_rel"] < 1e-4
    assert json.loads((out / "setup.json").read_text())["status"] == "passed"
    assert "## a kernel: passed" in (out / "summary.md").read_text()
    if sig == signal.SIGTERM:  # the running part is stopped and recorded as such
        part_b = json.loads((out / "part-b.json").read_text())
        assert part_b["status"] == "failed" and part_b["reason"] == "stopped: the suite received signal 15"
        assert process.returncode == 128 + 15
    else:
        assert not (out / "part-b.json").exists()
    names = [p.name for p in out.iterdir()]
    assert len(names) <= 8 and all(not name.startswith(".") for name in names), names


@pytest.mark.slow  # minutes: a venv reaching only the lent machine's packages, then every part of the dry run
def test_device_twin_runs_every_part_from_the_carried_wheels(tmp_path):
    done = subprocess.run([sys.executable, "benchmarks/device_twin.py", "--keep", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    records = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "out").glob("*.json")}
    assert set(records) == {"setup", *(f"part-{p.letter}" for p in gpu_suite.PARTS)}
    assert records["setup"]["environment"]["packages"] == {
        "mlflow": False, "jsonschema": True, "rdkit": True, "snakemake": False, "dvc": False, "transformers": True,
        "sklearn": True}
    assert records["part-d"]["figures"]["pretrain/exlm"]["align_backend"] == "reference"
    assert records["part-e"]["figures"]["finetune"]["metric"] == "accuracy"


def test_tracking_off_tracks_nothing_and_the_job_goes_on(tmp_path, monkeypatch, caplog):
    """The lent machine has no MLflow: MASKBENCH_TRACKING=off (set by the suite) makes the
    Tracker a no-op, with a warning, and creates no store."""
    from maskbench.train.tracking import Tracker

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MASKBENCH_TRACKING", "off")
    card = tmp_path / "card.json"
    card.write_text(json.dumps({"source": {"files": {"a": "0" * 64}}}))
    with Tracker("maskbench", "pretrain/mlm", tags={"stage": "pretrain"}, params={"lr": 1},
                 data_cards=[card]) as tracker:
        tracker.log_metrics({"train_loss": 1.0}, step=1)
        tracker.log_params({"steps": 1})
        tracker.set_tag("align_backend", "cuda")
        tracker.log_artifact(card)
    assert tracker.run_id is None
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlartifacts").exists()
    assert "MASKBENCH_TRACKING=off: pretrain/mlm is not tracked" in caplog.text


def test_collect_files_a_lease_under_its_date_and_device(tmp_path):
    back = tmp_path / "back"
    common = {"mode": "device", "started": "2026-12-01T10:00:00+00:00", "git_commit": "abc", "source_digest": "d"}
    setup = {"part": "0", "name": "setup", "status": "passed", "duration_s": 20, **common,
             "environment": {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0"}}
    kernel = {"part": "a", "name": "kernel", "status": "failed", "reason": "exit status 1", "duration_s": 3, **common,
              "figures": {"kernel": "CUDA kernel (CuPy)"}}
    for name, record in (("setup", setup), ("part-a", kernel)):
        (back / f"{name}.json").parent.mkdir(exist_ok=True)
        (back / f"{name}.json").write_text(json.dumps(record))
    dest = gpu_suite.collect(back, into=tmp_path / "results")
    assert dest == tmp_path / "results" / "2026-12-01-nvidia-h100-80gb-hbm3"
    assert sorted(p.name for p in dest.iterdir()) == ["part-a.json", "setup.json", "summary.md"]
    text = (dest / "summary.md").read_text()
    assert text.startswith("# GPU suite: NVIDIA H100 80GB HBM3\n") and "commit: abc" in text
    assert "## a kernel: failed" in text and "exit status 1" in text


def test_part_a_fails_a_kernel_outside_the_tolerance_and_keeps_its_figures(tmp_path, monkeypatch):
    import gpu_parts
    from maskbench.align import dag_loss

    off = lambda log_emit, log_trans: dag_loss(log_emit, log_trans, backend="reference") * (1 + 1e-3)
    monkeypatch.setattr(gpu_parts, "host_twin_loss", lambda: off)
    progress = gpu_parts.Progress(tmp_path / "a.json", budget_s=120)
    shapes = {**gpu_parts.SHAPES["dry"], "align_sizes": {"tiny": (2, 5, 14)}, "align_repeats": 1}
    with pytest.raises(SystemExit, match="differs from the reference by more than 0.0001"):
        gpu_parts.part_a(progress, dry=True, shapes=shapes)
    figures = json.loads((tmp_path / "a.json").read_text())
    assert figures["tiny"]["within_tolerance"] is False
    assert figures["tiny"]["error"]["log_z"]["max_rel"] == pytest.approx(1e-3, rel=1e-3)
