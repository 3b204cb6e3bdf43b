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
import gpu_parts  # noqa: E402
import gpu_suite  # noqa: E402


def test_plan_fits_the_lease_and_lists_every_part():
    done = subprocess.run([sys.executable, "benchmarks/gpu_suite.py", "--plan"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for part in gpu_suite.PARTS:
        assert f"{part.letter} {part.name}" in done.stdout
    # every command within one lease command, all of them with the machine's start within the device time
    for number, letters in enumerate(gpu_suite.COMMANDS, 1):
        seconds = gpu_suite.SETUP.budget_s + sum(gpu_suite.BY_LETTER[x].budget_s for x in letters)
        assert seconds <= gpu_suite.COMMAND_S <= 600 - 60
        assert f"command {number}: python3 benchmarks/gpu_suite.py --parts {','.join(letters)} " in done.stdout
        assert f"= {seconds} s (at most {gpu_suite.COMMAND_S} s)" in done.stdout
    device_s = gpu_suite.lease_seconds()
    assert device_s == gpu_suite.MACHINE_START_S + sum(
        gpu_suite.CALL_S + gpu_suite.command_seconds(c) for c in gpu_suite.COMMANDS) <= gpu_suite.DEVICE_S == 900
    assert gpu_suite.MACHINE_START_S >= 120 and f"= {device_s} s of the 900 s device time" in done.stdout
    assert "carry .whl, .lease; setup + a + f + g" in done.stdout  # the lease table's prepared folder travels
    assert max(map(len, done.stdout.splitlines())) <= gpu_suite.WIDTH == 120  # a terminal's width
    selected = subprocess.run([sys.executable, "benchmarks/gpu_suite.py", "--plan", "--parts", "a,d"], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    assert "b steps" not in selected.stdout and "d pretrain" in selected.stdout
    assert f"total {gpu_suite.command_seconds('ad')} s with setup: fits one lease command" in selected.stdout
    assert gpu_suite.command_seconds("ad") == gpu_suite.SETUP.budget_s + 90 + 80
    wrong = subprocess.run([sys.executable, "benchmarks/gpu_suite.py", "--plan", "--parts", "a,x"], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and "unknown x" in wrong.stderr


def test_the_lease_runs_what_is_open_first_and_every_part_once():
    """Issue 71's order: the kernel and the papers' compiled steps, then the lease table, then the
    new fine-tuning and profile parts; what the 2026-11-28 lease measured last, outside the lease."""
    order = [p.letter for p in gpu_suite.PARTS]
    assert order[:3] == ["a", "f", "g"] and set(order[3:5]) == {"h", "e"}
    leased = [x for command in gpu_suite.COMMANDS for x in command]
    assert leased == order[:len(leased)]  # the commands run the parts in the suite's order
    assert sorted(order) == sorted(set(order)) == sorted(gpu_parts.PARTS)  # a process for every part, once
    # compiled MLM at the gpu-day's 128 x 128 is on record twice: part f times the papers' 32 x 512 only
    # MAE-LM's paper decoder, never timed, before the ExLM steps a short budget may drop
    assert gpu_suite.PAPER_OBJECTIVES == ("mlm", "mae_lm_4layer_decoder", "exlm_k4", "exlm_k8")
    assert gpu_parts.step_shapes(False, {}, "paper")["seq_len"] == 512


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
    written = json.loads((tmp_path / gpu_suite.RECORDS).read_text())  # each written as its part ended
    assert written == {f"part-{letter}": record for letter, record in zip("abc", records)}
    assert sorted(p.name for p in tmp_path.iterdir()) == [gpu_suite.RECORDS, "summary.md"]
    summary = (tmp_path / "summary.md").read_text()
    assert "## a slow: failed" in summary and "## c fine: passed" in summary


def test_a_parts_returned_file_comes_back_beside_the_records_and_nothing_else_does(tmp_path):
    out = tmp_path / "out"
    suite = ScriptedSuite(out, {})
    leaves = ("import json, sys, pathlib; scratch = pathlib.Path(sys.argv[1]).parent; "
              "(scratch / 'table.md').write_text('| a table |'); (scratch / 'trace.json').write_text('{}'); "
              "open(sys.argv[1], 'w').write(json.dumps({'rows': 1}))")
    suite.scripts = {"g": leaves, "h": leaves}
    returned = suite.run_part(gpu_suite.Part("g", "returns", "nothing", 30, 30, returns=("table.md", "absent.md")))
    kept = suite.run_part(gpu_suite.Part("h", "keeps", "nothing", 30, 30))
    assert returned["returned"] == ["table.md"] and kept["returned"] == []
    assert (out / "table.md").read_text() == "| a table |"
    assert sorted(p.name for p in out.iterdir()) == [gpu_suite.RECORDS, "summary.md", "table.md"]


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
    out, started = tmp_path / "out", time.monotonic()
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    process = subprocess.Popen([sys.executable, "benchmarks/gpu_suite.py", "--dry", "--parts", "a,b", "--out",
                                str(out)], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        wait_for(out / gpu_suite.RECORDS, process, 600)  # setup's record first
        while "part-a" not in json.loads((out / gpu_suite.RECORDS).read_text()):
            assert process.poll() is None and time.monotonic() - started < 600, "part a did not end"
            time.sleep(0.5)
        time.sleep(2)  # part b under way
        if sig == signal.SIGKILL:  # the suite and its part's process, with no chance to write anything
            os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    records = json.loads((out / gpu_suite.RECORDS).read_text())
    part_a = records["part-a"]
    assert part_a["status"] == "passed" and part_a["mode"] == "dry"
    # the host twin's float32 offsets from one float64 scale per step: the exactness tests' 1e-4 relative
    assert part_a["figures"]["tiny"]["error"]["log_z"]["max_rel"] < 1e-4
    assert records["setup"]["status"] == "passed"
    assert "## a kernel: passed" in (out / "summary.md").read_text()
    if sig == signal.SIGTERM:  # the running part is stopped and recorded as such
        part_b = records["part-b"]
        assert part_b["status"] == "failed" and part_b["reason"] == "stopped: the suite received signal 15"
        assert process.returncode == 128 + 15
    else:
        assert "part-b" not in records
    names = [p.name for p in out.iterdir()]
    assert len(names) <= 8 and all(not name.startswith(".") for name in names), names


@pytest.mark.slow  # minutes: a venv reaching only the lent machine's packages, then every part of the dry run
def test_device_twin_runs_every_part_from_the_carried_wheels(tmp_path):
    done = subprocess.run([sys.executable, "benchmarks/device_twin.py", "--keep", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    records = json.loads((tmp_path / "out" / gpu_suite.RECORDS).read_text())
    assert set(records) == {"setup", *(f"part-{p.letter}" for p in gpu_suite.PARTS if p.letter != "g")}
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
    lease = {"part": "g", "name": "lease", "status": "passed", "duration_s": 100, **common, "returned": ["t.md"],
             "figures": {"profile": "lease", "exit_status": 0, "build_seconds": 90.0,
                         "jobs": [{"stage": "pretrain", "seconds": 30.0}, {"stage": "pretrain", "seconds": 40.5}]}}
    back.mkdir()
    (back / gpu_suite.RECORDS).write_text(json.dumps({"setup": setup, "part-g": lease, "part-a": kernel}))
    (back / "t.md").write_text("| table1 |")
    dest = gpu_suite.collect(back, into=tmp_path / "results")
    assert dest == tmp_path / "results" / "2026-12-01-nvidia-h100-80gb-hbm3"
    assert sorted(p.name for p in dest.iterdir()) == ["part-a.json", "part-g.json", "setup.json", "summary.md", "t.md"]
    text = (dest / "summary.md").read_text()
    assert text.startswith("# GPU suite: NVIDIA H100 80GB HBM3\n") and "commit: abc" in text
    assert text.index("## a kernel: failed") < text.index("## g lease: passed")  # the suite's order
    assert "exit status 1" in text and "| pretrain | 2 | 70.5 | 40.5 |" in text
    # the lease's second command adds its records; the first command's setup stays
    second = tmp_path / "second"
    second.mkdir()
    (second / gpu_suite.RECORDS).write_text(json.dumps({"setup": setup | {"duration_s": 9}, "part-e": kernel | {
        "part": "e", "name": "finetune", "figures": {}}}))
    assert gpu_suite.collect(second, into=tmp_path / "results") == dest
    assert json.loads((dest / "setup.json").read_text())["duration_s"] == 20
    assert json.loads((dest / "setup-2.json").read_text())["duration_s"] == 9
    assert "## e finetune: failed" in (dest / "summary.md").read_text()


def test_part_a_fails_a_kernel_outside_the_tolerance_and_keeps_its_figures(tmp_path, monkeypatch):
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


def test_cli_timing_stamps_every_step_and_profiles_only_its_window(tmp_path, monkeypatch):
    """cli_timing.py around a command that takes 6 optimizer steps and exits 3: every step
    stamped after the wrapper started, the exit status kept, and the profile's rows per step
    over exactly its 2 active steps (one optimizer step each)."""
    import cli_timing
    import torch

    import maskbench.cli

    def training(argv):
        model = torch.nn.Linear(8, 8)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(1, 7):
            model(torch.randn(4, 8)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            if step == 5 and window == "1,1,2":  # the window closed at step 4: its record is there already,
                assert isinstance(json.loads(record_file.read_text())["profile"], dict)  # should the job be killed
        raise SystemExit(3)
    monkeypatch.setattr(maskbench.cli, "main", training)
    record_file = tmp_path / "steps.json"
    for window, steps_needed in (("1,1,2", 4), ("4,1,2", 7)):
        monkeypatch.setattr(sys, "argv", ["cli_timing.py", "--record", str(record_file), "--profile", window, "--",
                                          "pretrain", "--run", "x"])
        assert cli_timing.main() == 3
        record = json.loads(record_file.read_text())
        assert record["argv"] == ["pretrain", "--run", "x"] and record["exit_status"] == 3 and record["steps"] == 6
        assert record["wrapper_started"] <= record["step_times"][0] and record["step_times"] == sorted(
            record["step_times"])
        if steps_needed > 6:
            assert record["profile"] == "not recorded: the command took 6 steps, the window needs 7"
            continue
        profile = record["profile"]
        assert profile["steps"] == 2 and profile["sorted_by"] == "operators by self CPU time"
        rows = {row["name"]: row for row in profile["rows"]}
        assert rows["Optimizer.step#SGD.step"]["calls_per_step"] == 1.0
        assert not any(name.startswith("ProfilerStep") for name in rows)
        assert 0 < sum(row["share"] for row in profile["rows"]) <= 1.0001


def test_step_figures_are_the_start_up_rate_and_tail_of_a_job():
    figures = gpu_parts.step_figures(started=100.0, seconds=10.0, stamps=[104.0, 105.0, 107.0])
    assert figures == {"startup_s": 4.0, "steps": 3, "steps_per_s": 0.667, "after_last_step_s": 3.0}
    assert gpu_parts.step_figures(100.0, 5.0, []) == {"steps": 0}


def test_part_a_times_every_kernel_backend_that_maskbench_align_declares(tmp_path, monkeypatch):
    import maskbench.align

    assert gpu_parts.kernel_backends() == ["cuda", "cuda_split"]  # the two kernels align declares
    monkeypatch.setattr(maskbench.align, "BACKENDS", ("auto", "reference", "cuda", "cuda_tiled"))
    assert gpu_parts.kernel_backends() == ["cuda", "cuda_tiled"]
    progress = gpu_parts.Progress(tmp_path / "a.json", budget_s=15)  # too little for pytest -m gpu: left out
    shapes = {**gpu_parts.SHAPES["dry"], "align_sizes": {"tiny": (2, 5, 14)}, "align_repeats": 1}
    gpu_parts.part_a(progress, dry=True, shapes=shapes)
    figures = json.loads((tmp_path / "a.json").read_text())
    assert figures["backends_not_timed"] == {"cuda_tiled": "no CPU stand-in"}  # on a GPU: timed as "tiny [cuda_tiled]"
    assert figures["tiny"]["backend"] == "cuda" and figures["tiny"]["within_tolerance"] is True
    assert "2x5x14" in figures["phases_ms"] and figures["left_out_for_budget"] == ["pytest_gpu"]


def test_part_g_builds_from_the_carried_folder_and_hands_back_the_table(tmp_path, monkeypatch):
    import lease_table

    progress = gpu_parts.Progress(tmp_path / "g.json", budget_s=200)
    monkeypatch.setattr(gpu_parts, "REPO", tmp_path)
    with pytest.raises(SystemExit, match=r"\.lease/data-targets\.txt is missing: prepare the folder here with "
                                         r"`python benchmarks/lease_table.py prepare \.lease` and carry \.lease"):
        gpu_parts.part_g(progress, True, {}, tmp_path, None, "abc")
    (tmp_path / ".lease").mkdir()
    (tmp_path / ".lease" / lease_table.TARGETS).write_text("data/x\n")
    calls = []

    def build(folder, dry, wheels, out, commit, budget_s):
        calls.append((folder, dry, wheels, commit, budget_s))
        out.mkdir(parents=True, exist_ok=True)
        (out / "lease-table.json").write_text(json.dumps({"profile": "lease-dry", "jobs": [], "exit_status": status}))
        (out / "lease-table.md").write_text("| table1 |")
        return status
    monkeypatch.setattr(lease_table, "run", build)
    status = 0
    gpu_parts.part_g(progress, True, {}, tmp_path, None, "abc")
    folder, dry, wheels, commit, budget_s = calls[0]
    assert (folder, dry, wheels, commit) == (tmp_path / ".lease", True, tmp_path / ".whl", "abc")
    assert 170 < budget_s <= 180  # the part's budget less the time to write its record
    assert json.loads((tmp_path / "g.json").read_text()) == {"profile": "lease-dry", "jobs": [], "exit_status": 0}
    assert (tmp_path / "lease-table.md").read_text() == "| table1 |"
    status = 1
    with pytest.raises(SystemExit, match="the lease table's build exited with 1"):
        gpu_parts.part_g(progress, False, {}, tmp_path, tmp_path / "wheels", "abc")
    assert calls[1][2] == tmp_path / "wheels" and json.loads((tmp_path / "g.json").read_text())["exit_status"] == 1


@pytest.mark.slow  # about 2 minutes: three CLI jobs on the tiny workspace
def test_the_profile_and_fine_tuning_parts_run_dry(tmp_path):
    """Parts h and e of the dry suite: the CLI's ExLM steps profiled; a fine-tuning job's
    start-up, rate and the plan's FLOPs over its time, of the `none` control (no part d ran)."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run([sys.executable, "benchmarks/gpu_suite.py", "--dry", "--parts", "h,e", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:]
    records = json.loads((out / gpu_suite.RECORDS).read_text())
    profile = records["part-h"]["figures"]["profile"]
    assert profile["steps"] == 2 and 5 < len(profile["rows"]) <= 15
    exlm = records["part-h"]["figures"]["pretrain/exlm"]
    assert exlm["steps"] == 5 and 0 < exlm["startup_s"] < exlm["seconds"]
    figures = records["part-e"]["figures"]
    assert figures["finetune"]["steps"] == 4 and 0 < figures["finetune"]["startup_s"] < figures["finetune"]["seconds"]
    rate = figures["finetune_rate"]
    assert rate["run"] == "none" and rate["plan_gflop"] > 0 and rate["tflop_per_s_plan_count"] > 0
    text = (out / "summary.md").read_text()
    assert "## h profile: passed" in text and "Top operators by self CPU time over 2 steps" in text
    assert "Fine-tuning `none`: " in text and "TFLOP/s (the rate the plan prices)" in text
    assert sorted(p.name for p in out.iterdir()) == [gpu_suite.RECORDS, "summary.md"]
