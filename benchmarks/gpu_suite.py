"""Everything that needs a GPU, in one command: tests, benchmarks and short runs of the workflow.

Parts, each a subprocess with its own time budget (a failure or a timeout stops that part only):
  gpu_tests        pytest -m gpu (the CUDA kernel against the reference)
  align            bench_align.py's GPU part: kernel vs reference       -> results/align_gpu.json
  objectives       bench_objectives.py on CUDA, base-text, compiled     -> results/objectives_gpu.json
  pretrain/<run>   `maskbench pretrain` of every objective, 200 steps, in a scratch workspace on
                   a synthetic corpus (bench_ddp.py's), with its tokens/s, loss and align backend
  ddp              bench_ddp.py on 2 GPUs (skipped on one: NCCL needs one GPU per process)
                                                                        -> results/ddp_gpu.json
  finetune, probe  `maskbench finetune` and `maskbench probe` of the pretrained mlm on a small
                   generated classification task
The report, results/gpu_suite_<device>.json, names the device, torch / CUDA / CuPy versions and
the git commit, and gives each part's status (passed, failed, skipped with the reason), duration
and key figures; the exit status is 1 if any part failed. The whole plan fits 25 minutes on one
H100 (`--budget`): a part gets its own budget or what is left, whichever is less.

`--dry` runs the same plan on the CPU in a few minutes (tiny model, 5 steps; the gpu tests are
collected and skip; the CUDA-only parts are skipped with their command lines printed), so that
GPU time goes to measuring, not to debugging this script.

On the GPU machine (torch, CuPy, transformers, pandas and scikit-learn installed; the rest
carried as wheels in wheels/):

    pip install --no-index --find-links wheels/ mlflow snakemake dvc rdkit jsonschema pytest
    pip install --no-index --no-deps -e .
    python benchmarks/gpu_suite.py                  # -> benchmarks/results/gpu_suite_<device>.json
    python benchmarks/gpu_suite.py --dry --out /tmp/suite.json   # anywhere, CPU only

This process imports only torch, yaml and numpy (and CuPy for its version): the parts import
the workflow's heavier dependencies (MLflow, jsonschema, ...) in their own processes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ddp import synthetic_corpus, workspace  # noqa: E402  (benchmarks/ is not a package)

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
RUNS = ("mlm", "varlen_mlm", "repeated_mlm", "mae_lm", "exlm", "ar", "dar")  # one run of each objective
TASK = "rotten_tomatoes"  # a classification task of params.yaml, whose rows the suite generates
PYTHON = sys.executable

# What a run measures and what it may spend (seconds), on one H100 and in --dry on a CPU.
FULL = dict(size="base-text", seq_len=128, micro_batch=32, vocab=8192, words=400_000, steps=200, log_every=20,
            device="cuda", budgets={"gpu_tests": 240, "align": 180, "objectives": 360, "pretrain": 90,
                                    "ddp": 420, "finetune": 60, "probe": 60})
DRY = dict(size="tiny", seq_len=32, micro_batch=4, vocab=600, words=20_000, steps=5, log_every=1,
           device="cpu", budgets={"gpu_tests": 120, "align": 60, "objectives": 60, "pretrain": 120,
                                  "ddp": 60, "finetune": 120, "probe": 120})


class Suite:
    """Runs the parts one after another within the total budget and keeps their records."""

    def __init__(self, budget_s: float, dry: bool):
        self.deadline = time.monotonic() + budget_s
        self.dry = dry
        self.parts: dict[str, dict] = {}

    def skip(self, name: str, reason: str, command: list[str] | None = None) -> None:
        if command:
            print(f"[{name}] would run: {shlex.join(command)}", flush=True)
        self._record(name, {"status": "skipped", "reason": reason, "command": command and shlex.join(command)})

    def run(self, name: str, command: list[str], budget_s: float, cwd: Path = REPO, env: dict | None = None,
            figures=None) -> bool:
        """Run `command` within min(budget_s, what is left); `figures(output)` reads its key
        figures once it has passed. True when it passed."""
        left = self.deadline - time.monotonic()
        if left < 10:
            self.skip(name, "the suite's total budget is spent", command)
            return False
        timeout = min(budget_s, left)
        print(f"[{name}] {shlex.join(command)}  (budget {timeout:.0f} s)", flush=True)
        tick = time.monotonic()
        try:
            done = subprocess.run(command, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True,
                                  text=True, timeout=timeout)
            status = "passed" if done.returncode == 0 else "failed"
            output, reason = done.stdout + done.stderr, f"exit status {done.returncode}"
        except subprocess.TimeoutExpired as exc:
            status, reason = "failed", f"timed out after {timeout:.0f} s"
            output = "".join(o.decode(errors="replace") if isinstance(o, bytes) else (o or "")
                             for o in (exc.stdout, exc.stderr))
        record = {"status": status, "duration_s": round(time.monotonic() - tick, 1), "command": shlex.join(command)}
        if status == "passed" and figures is not None:
            try:
                record["figures"] = figures(output)
            except Exception as exc:  # the part ran, but left less than expected: that is a failure too
                record.update(status="failed", reason=f"no figures: {type(exc).__name__}: {exc}")
        if record["status"] == "failed":
            record.setdefault("reason", reason)
            record["output_tail"] = output[-3000:]
        self._record(name, record)
        return record["status"] == "passed"

    def _record(self, name: str, record: dict) -> None:
        self.parts[name] = record
        shown = record.get("figures") or record.get("reason", "")
        print(f"[{name}] {record['status']} {record.get('duration_s', '')} {shown}", flush=True)


def environment() -> dict:
    """The device, versions and commit a report belongs to."""
    try:
        import cupy
        cupy_version = cupy.__version__
    except Exception as exc:
        cupy_version = f"not importable ({type(exc).__name__})"
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    cuda = torch.cuda.is_available()
    return {"device": torch.cuda.get_device_name() if cuda else "cpu", "gpus": torch.cuda.device_count(),
            "torch": torch.__version__, "cuda": torch.version.cuda, "cupy": cupy_version,
            "git_commit": commit or None, "git_dirty": bool(dirty), "python": sys.version.split()[0]}


def slug(device: str, dry: bool) -> str:
    return "dry-cpu" if dry else re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")


def generated_task(root: Path, rows: int, seed: int = 0) -> None:
    """A two-class task of the synthetic corpus's words, as the task stage leaves it (the layout
    of tests/conftest.py `task_files`): the label is whether word w0..w9 occurs, so it is learnable."""
    rng = np.random.default_rng(seed)
    def row(i):
        words = [f"w{w}" for w in rng.integers(10, 500, 12)]
        if i % 2:
            words[rng.integers(12)] = f"w{rng.integers(10)}"
        return {"text": " ".join(words), "text_pair": None, "label": i % 2}
    task = root / "data/tasks" / TASK
    task.mkdir(parents=True)
    for split, n in (("train", rows), ("dev", rows // 4), ("test", rows // 4)):
        (task / f"{split}.jsonl").write_text("".join(json.dumps(row(i)) + "\n" for i in range(n)))
    cards = root / "data/cards"
    (cards / f"task-{TASK}.json").write_text(json.dumps({"kind": "classification", "label_names": ["no", "yes"]}))
    (cards / f"download-{TASK}.json").write_text(json.dumps({"source": {"files": {"generated": "0" * 64}}}))


def prepare_workspace(scratch: Path, plan: dict) -> Path:
    """bench_ddp's workspace on its synthetic corpus, with every objective's run, a short
    fine-tuning of the generated task and the suite's device."""
    corpus = scratch / "corpus"
    synthetic_corpus(corpus, plan["vocab"], words=plan["words"])
    settings = SimpleNamespace(runs=RUNS, threads=1, **{k: plan[k] for k in ("size", "seq_len", "micro_batch",
                                                                              "steps", "log_every", "device")})
    root = workspace(scratch / "workspace", corpus, settings, processes=1)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["pretrain"]["warmup_steps"] = min(10, plan["steps"] - 1)
    params["tasks"][TASK]["overrides"] = {"epochs": 1, "max_train_examples": None}
    params["finetune"]["settings"].update(device=plan["device"], batch_size=16, max_len=32)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    generated_task(root, rows=400 if plan["device"] == "cuda" else 64)
    return root


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def pytest_figures(output: str) -> dict:
    """The counts of pytest's last line ("3 passed, 12 skipped, 900 deselected in 9.1s")."""
    last = output.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|deselected|error)", last)}


def pretrain_figures(root: Path, run: str):
    def figures(output):
        metrics = read_json(root / f"runs/pretrain/{run}/metrics.json")
        return {k: metrics[k] for k in ("steps", "tokens_per_s", "train_loss", "valid_loss", "align_backend")}
    return figures


def stage_figures(path: Path, keys: tuple[str, ...]):
    return lambda output: {k: read_json(path)[k] for k in keys}


def align_figures(output):
    sizes = read_json(RESULTS / "align_gpu.json")["sizes"]
    return {name: {k: entry[k] for k in ("speedup", "effective_bandwidth_gbs")} | {"kernel_s": entry["cuda"]["seconds_median"]}
            for name, entry in sizes.items() if isinstance(entry, dict)}


def objectives_figures(output):
    report = read_json(RESULTS / "objectives_gpu.json")
    per_objective = {name: {k: o.get(k) for k in ("tokens_per_s", "tflop_per_s", "fraction_of_peak")}
                     for name, o in report["objectives"].items()}
    return {"objectives": per_objective, "exlm_k4_vs_mlm": report.get("exlm_k4_vs_mlm")}


def ddp_figures(output):
    results = read_json(RESULTS / "ddp_gpu.json")["results"]
    return {run: [{k: row[k] for k in ("processes", "tokens_per_s_per_process", "efficiency")} for row in rows]
            for run, rows in results.items()}


def run_suite(dry: bool, budget_s: float) -> dict:
    plan = DRY if dry else FULL
    budgets = plan["budgets"]
    cuda_ok = torch.cuda.is_available() and not dry
    suite = Suite(budget_s, dry)
    no_cuda = "no CUDA (--dry)" if dry else "no CUDA"

    suite.run("gpu_tests", [PYTHON, "-m", "pytest", "-q", "-m", "gpu", "-rs", "tests/"], budgets["gpu_tests"],
              figures=pytest_figures)

    align = [PYTHON, "benchmarks/bench_align.py", "--skip-cpu", "--repeats", "5"]
    objectives = [PYTHON, "benchmarks/bench_objectives.py", "--device", "cuda", "--batch", "32", "--seq-len", "512",
                  "--size", "base-text", "--vocab", "32768", "--compile", "--rounds", "5", "--peak-tflops", "989",
                  "--out", str(RESULTS / "objectives_gpu.json")]
    source = {"PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if cuda_ok:
        suite.run("align", align, budgets["align"], env=source, figures=align_figures)
        suite.run("objectives", objectives, budgets["objectives"], env=source, figures=objectives_figures)
    else:
        suite.skip("align", no_cuda, align)
        suite.skip("objectives", no_cuda, objectives)

    with tempfile.TemporaryDirectory(prefix="gpu-suite-") as scratch:
        root = prepare_workspace(Path(scratch), plan)
        mlflow = {"MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}
        cli = [PYTHON, "-m", "maskbench.cli"]
        for run in RUNS:
            suite.run(f"pretrain/{run}", [*cli, "pretrain", "--run", run], budgets["pretrain"], cwd=root,
                      env=mlflow, figures=pretrain_figures(root, run))
        if suite.parts["pretrain/mlm"]["status"] == "passed":
            suite.run("finetune", [*cli, "finetune", "--run", "mlm", "--task", TASK, "--seed", "1"],
                      budgets["finetune"], cwd=root, env=mlflow,
                      figures=stage_figures(root / f"runs/finetune/mlm/{TASK}/seed1/metrics.json",
                                            ("metric", "dev", "test")))
            suite.run("probe", [*cli, "probe", "--run", "mlm", "--task", TASK], budgets["probe"], cwd=root,
                      env=mlflow, figures=stage_figures(root / f"runs/probe/mlm/{TASK}/metrics.json",
                                                        ("metric", "best_layer", "dev", "value")))
        else:
            suite.skip("finetune", "pretrain/mlm failed")
            suite.skip("probe", "pretrain/mlm failed")

    ddp = [PYTHON, "benchmarks/bench_ddp.py", "--device", "cuda", "--processes", "1", "2", "--runs", "mlm", "exlm",
           "--steps", "200", "--size", "base-text", "--seq-len", "512", "--micro-batch", "32", "--vocab", "32768",
           "--out", str(RESULTS / "ddp_gpu.json")]
    if not cuda_ok:
        suite.skip("ddp", no_cuda, ddp)
    elif torch.cuda.device_count() < 2:
        suite.skip("ddp", "one GPU: NCCL cannot run two processes on one device", ddp)
    else:
        suite.run("ddp", ddp, budgets["ddp"], env=source, figures=ddp_figures)
    return suite.parts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry", action="store_true", help="the same plan on the CPU, tiny and short; no GPU needed")
    parser.add_argument("--budget", type=float, default=25 * 60, help="seconds for the whole suite (default 25 min)")
    parser.add_argument("--out", type=Path, help="the report (default results/gpu_suite_<device>.json)")
    args = parser.parse_args()
    if not args.dry and not torch.cuda.is_available():
        parser.error("no CUDA device here: run with --dry to check the suite on the CPU")
    tick = time.monotonic()
    report = {**environment(), "mode": "dry" if args.dry else "full"}
    report["parts"] = run_suite(args.dry, args.budget)
    report["duration_s"] = round(time.monotonic() - tick, 1)
    failed = [name for name, part in report["parts"].items() if part["status"] == "failed"]
    report["failed"] = failed
    out = args.out or RESULTS / f"gpu_suite_{slug(report['device'], args.dry)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}: {len(report['parts']) - len(failed)} of {len(report['parts'])} parts did not fail"
          + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
