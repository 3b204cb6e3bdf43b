"""Everything a lent GPU should check, in the commands that fit the lease (docs/benchmarks.md).

    python benchmarks/gpu_suite.py --plan                          # the parts, budgets and the lease's commands
    python3 benchmarks/gpu_suite.py --parts a,f,g --wheels .whl --commit <sha>   # on the lent machine: into $OUT
    python benchmarks/gpu_suite.py --dry --out /tmp/suite         # anywhere, CPU only: the same parts, tiny
    python benchmarks/gpu_suite.py --table DIR                     # the figures of a records folder, as markdown
    python benchmarks/gpu_suite.py --collect DIR                   # ... copied to benchmarks/results/gpu/, to commit

The parts run in the order of what is still open (`PARTS`), each in its own process
(benchmarks/gpu_parts.py) under its own time budget: a part that fails, or overruns and is
stopped, ends only itself, and hands over the figures it measured before. Before them `setup`
installs the carried wheels (`--wheels`, offline) and records the machine. A lease runs
`COMMANDS`, each at most `COMMAND_S` with its setup, all of them with the machine's start within
the 15 device-minutes (`--plan` prints the arithmetic); the parts in no command were measured by
an earlier lease.

Every record goes into one file in `--out` (default `$OUT`, the folder a lent machine sends
back), `records.json`, rewritten atomically the moment a part ends, so a command killed at any
moment keeps every part that finished; beside it `summary.md` (the figures as tables) and the
files a part returns (part g: `lease-table.md`): 3 files of the lease's 8. A record names the
device, the versions, the git commit (`--commit` where the copied tree has no .git) and a
digest of the source tree, the mode (a dry run says so in every record and table), the part's
status, duration and budget, and its figures; what a part did not measure is listed as left
out, never filled in.

Where a package of the workflow is missing on the machine and a part can run without it, the
part runs without it and its record says so: MLflow (tracking off for the CLI parts, through
MASKBENCH_TRACKING=off), never silently. The exit status is 1 if any part failed.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
from lease_table import BUDGET_S as LEASE_BUILD_S  # noqa: E402  (light: no torch)
from maskbench.io import write_json, write_text  # noqa: E402  (light: no torch)

PYTHON = sys.executable


@dataclass(frozen=True)
class Part:
    letter: str
    name: str
    settles: str
    budget_s: int      # on the lent GPU
    dry_budget_s: int  # on a CPU with --dry (no lease to fit; a slow shared machine)
    returns: tuple[str, ...] = ()  # files the part leaves in the scratch folder that come back beside the records


LEASE_AROUND_S = 20  # part g's time around the lease table's build: its install, copy, --touch and record
SETUP = Part("0", "setup", "the carried wheels install offline; which device, versions and packages the parts run with",
             15, 120)
# In the order of what is still open (issue "Every lease settles the next questions"): the kernel
# and the papers' compiled steps, then the workflow itself on the GPU, then the new measurements
# of fine-tuning and of the CLI's ExLM step; last what the 2026-11-28 lease measured already.
PARTS = (
    Part("a", "kernel", "the CUDA states-alignment kernel (every kernel backend maskbench.align declares) matches the "
         "reference (log Z, both gradients) at the paper's sizes and three between them, and how much faster it is; "
         "its forward, backward recursion and transition gradient timed apart at L = 308 ... 1586 and B = 16, 32, 64 "
         "against the reference's forward and backward (the paper's shapes first); then pytest -m gpu on the kernel",
         90, 240),
    Part("f", "compiled", "the paper's steps under torch.compile(fullgraph=True) at the paper's 32 x 512 (base-text, "
         "vocabulary 32,768): MLM, MAE-LM with its 4-layer decoder, ExLM k = 4 and k = 8; tokens/s, MFU, peak memory, "
         "compilation time (a dry run: dynamo's eager backend, tiny shapes)", 180, 600),
    Part("g", "lease", "table1 built by Snakemake itself on the GPU (the `lease` profile, benchmarks/lease_table.py, "
         "from the carried .lease folder): the table, its card, every job's wall time (a dry run: the `lease-dry` "
         "profile on the CPU)", LEASE_BUILD_S + LEASE_AROUND_S, 900, returns=("lease-table.md",)),
    Part("h", "profile", "where the CLI's ExLM step spends its time: `maskbench pretrain --run exlm` (base-text, "
         "CuPy kernel) with three steps under torch.profiler, the top kernels by device time per step", 45, 300),
    Part("e", "finetune", "a fine-tuning job's start-up (process start to first optimizer step) and rate (rows/s, "
         "TFLOP/s in the plan's FLOP count) through `maskbench finetune` (bf16, base-text, 32 rows of 128 tokens), of "
         "part d's MLM or else the `none` control's encoder; then `maskbench probe` where the budget allows", 75, 600),
    Part("d", "pretrain", "`maskbench pretrain` of MLM (windows) and ExLM (whole documents, so the block length "
         "varies from step to step), 100 steps through the CLI and its launcher, ExLM on the CuPy kernel (a dry "
         "run: the reference); each job's start-up", 80, 600),
    Part("b", "steps", "every objective's eager bf16 training step at the gpu-day profile's shape (base-text, its "
         "micro-batch and length): tokens/s, MFU, peak memory; bf16 against float32 losses over 3 steps from the "
         "same start", 65, 300),
    Part("c", "memory", "whether the paper profile's largest planned shapes (estimated largest overall, and the "
         "largest ExLM k = 4) fit one GPU at their micro-batch, compiled where the profile compiles: measured peak "
         "against the plan's estimate", 95, 180),
)
BY_LETTER = {p.letter: p for p in PARTS}
# The lease (docs/benchmarks.md): 15 device-minutes in all, the machine's start and every call
# included; one command at most 10 minutes. What the commands' budgets may add up to:
DEVICE_S = 900          # the session's device time
MACHINE_START_S = 180   # a fresh machine's start (2-3 minutes), before any command runs
CALL_S = 20             # each call's transfers (the tree and carried folders out, $OUT back)
COMMAND_S = 540         # one command's setup and parts: the 600 s limit less a margin to stop and write
# The lease's commands, one after the other on the warm machine (the second must follow within
# its 30 s warm time): the open questions first. Parts in no command were measured by the lease
# of 2026-11-28 and run where a lease has time left (--parts).
COMMANDS = (("a", "f", "g"), ("h", "e"))
WIDTH = 120             # `--plan` fits a terminal of this many columns
# The objectives parts b and f time (bench_objectives' runs), in the order they are timed, which
# a short budget keeps first; bench_objectives' DP-less ExLM split is a benchmark, not a check.
OBJECTIVES = ("mlm", "exlm_k4", "mae_lm", "dar", "exlm_k2", "repeated_mlm_k2", "varlen_mlm", "ar")
# Part f: the papers' own shapes, compiled (compiled MLM at the gpu-day's 128 x 128 is on record
# twice, 2026-11-28's part-f.json and part-f-all.json, so it is not timed again). MAE-LM with its
# 4-layer decoder, never timed at any shape, goes before ExLM, whose k = 4 ran eager in part b:
# four compilations of 37-69 s each may not all fit the part's budget.
PAPER_OBJECTIVES = ("mlm", "mae_lm_4layer_decoder", "exlm_k4", "exlm_k8")
RECORDS = "records.json"  # every record of a run, rewritten after each part: with summary.md and the parts'
                          # returns, 3 files of the lease's 8
GRACE_S = 10  # a part stopped at its budget gets this long to leave (SIGTERM, then SIGKILL)

ENVIRONMENT = r"""
import importlib.util, json, platform, sys
import torch
from maskbench.align import cuda
cuda_ok = torch.cuda.is_available()
try:
    import cupy
    cupy_version = cupy.__version__
except Exception as exc:
    cupy_version = f"not importable ({type(exc).__name__})"
print(json.dumps({
    "device": torch.cuda.get_device_name() if cuda_ok else "cpu", "gpus": torch.cuda.device_count(),
    "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda_ok else None,
    "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
    "cupy": cupy_version, "kernel_unavailable": cuda.unavailable_reason() if cuda_ok else "no CUDA device",
    "cpu_count": __import__("os").cpu_count(),
    "packages": {name: importlib.util.find_spec(name) is not None
                 for name in ("mlflow", "jsonschema", "rdkit", "snakemake", "dvc", "transformers", "sklearn")},
}))
"""


def command_seconds(letters) -> int:
    """One command's budget: its setup and its parts."""
    return SETUP.budget_s + sum(BY_LETTER[letter].budget_s for letter in letters)


def lease_seconds(commands=COMMANDS) -> int:
    """The device time the commands take at their budgets: the machine's start, then each call."""
    return MACHINE_START_S + sum(CALL_S + command_seconds(c) for c in commands)


def plan_lines(parts=None) -> list[str]:
    """The parts and budgets; without `parts`, the lease's commands and their arithmetic."""
    shown = PARTS if parts is None else parts
    lines = [f"{'part':12} {'budget':>6}  settles"]
    for part in (SETUP, *shown):
        lines += textwrap.wrap(part.settles, WIDTH, initial_indent=f"{part.letter + ' ' + part.name:12} "
                               f"{part.budget_s:>4} s  ", subsequent_indent=" " * 22)
    if parts is not None:
        total = command_seconds(p.letter for p in parts)
        fits = "fits" if total <= COMMAND_S else "over"
        return lines + [f"total {total} s with setup: {fits} one lease command ({COMMAND_S} s)"]
    lines.append("")
    for number, letters in enumerate(COMMANDS, 1):
        carry = [".whl", *(".lease" for letter in letters if letter == "g")]
        lines += [f"command {number}: python3 benchmarks/gpu_suite.py --parts {','.join(letters)} --wheels .whl "
                  "--commit <sha>",
                  f"  carry {', '.join(carry)}; setup + {' + '.join(letters)} = {command_seconds(letters)} s "
                  f"(at most {COMMAND_S} s)"]
    rest = [p.letter for p in PARTS if not any(p.letter in c for c in COMMANDS)]
    calls = " + ".join(f"({CALL_S} + {command_seconds(c)})" for c in COMMANDS)
    lines += [f"lease: {MACHINE_START_S} s machine start + {calls} s calls = {lease_seconds()} s of the "
              f"{DEVICE_S} s device time",
              *textwrap.wrap(f"not in the lease's commands (measured 2026-11-28; --parts {','.join(rest)} where time "
                             "is left): " + ", ".join(f"{x} {BY_LETTER[x].name} {BY_LETTER[x].budget_s} s"
                                                      for x in rest), WIDTH)]
    return lines


def source_digest(root: Path = REPO) -> str:
    """A digest of the code the parts run (src/, benchmarks/*.py, params.yaml, the schemas):
    the same tree gives the same digest here and on the lent machine, .git or not."""
    files = sorted({*root.glob("src/**/*.py"), *root.glob("src/**/*.cu"), *root.glob("src/**/*.cuh"),
                    *root.glob("benchmarks/*.py"), root / "params.yaml", *root.glob("workflow/schemas/*")})
    digest = hashlib.sha256()
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def git_commit(given: str | None) -> dict:
    def git(*args):
        try:
            done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=20)
            return done.stdout.strip() if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            return None
    found = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": found or given or "unknown: no .git in this copy and no --commit",
            "git_dirty": None if found is None else bool(dirty), "source_digest": source_digest()}


class Suite:
    """Runs parts in their processes, each within its budget, and writes each record the moment
    its part ends."""

    def __init__(self, out: Path, dry: bool, env: dict, common: dict, wheels: Path | None = None):
        self.out, self.dry, self.env, self.common, self.wheels = out, dry, env, common, wheels
        self.scratch = Path(tempfile.mkdtemp(prefix="gpu-suite-"))
        self.records: dict[str, dict] = {}
        self.current: subprocess.Popen | None = None
        self.interrupted: int | None = None  # the signal that stopped the suite

    def run_part(self, part: Part) -> dict:
        budget = part.dry_budget_s if self.dry else part.budget_s
        progress = self.scratch / f"progress-{part.letter}.json"
        command = self.command(part, budget, progress)
        print(f"[{part.letter} {part.name}] budget {budget} s: {shlex.join(command)}", flush=True)
        tick = time.monotonic()
        status, reason, tail = self._supervise(part, command, budget)
        record = {"part": part.letter, "name": part.name, "settles": part.settles, "status": status,
                  "duration_s": round(time.monotonic() - tick, 1), "budget_s": budget, **self.common}
        if reason:
            record["reason"] = reason
        record["figures"] = json.loads(progress.read_text()) if progress.exists() else {}
        if status != "passed":
            record["output_tail"] = tail[-4000:]
        returned = [name for name in part.returns if (self.scratch / name).is_file()]
        for name in returned:
            write_text(self.out / name, (self.scratch / name).read_text())
        record["returned"] = returned
        self.write(f"part-{part.letter}", record)
        return record

    def command(self, part: Part, budget: float, progress: Path) -> list[str]:
        return [PYTHON, str(REPO / "benchmarks/gpu_parts.py"), part.letter, "--budget", str(budget),
                "--progress", str(progress), "--scratch", str(self.scratch), "--commit", self.common["git_commit"],
                *(["--wheels", str(self.wheels)] if self.wheels else []), *(["--dry"] if self.dry else [])]

    def _supervise(self, part: Part, command: list[str], budget: float) -> tuple[str, str | None, str]:
        """Run the part's process, echoing its output; stop it at its budget."""
        tail: list[str] = []
        self.current = process = subprocess.Popen(command, cwd=REPO, env={**os.environ, **self.env},
                                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def echo():
            for line in process.stdout:
                print(f"[{part.letter}] {line}", end="", flush=True)
                tail.append(line)
                del tail[:-200]
        reader = threading.Thread(target=echo, daemon=True)
        reader.start()
        try:
            process.wait(timeout=budget)
            reason = None if process.returncode == 0 else f"exit status {process.returncode}"
            status = "passed" if process.returncode == 0 else "failed"
            if self.interrupted:
                self.stop(process)
                status, reason = "failed", f"stopped: the suite received signal {self.interrupted}"
        except subprocess.TimeoutExpired:
            self.stop(process)
            status, reason = "failed", f"stopped at its budget of {budget:.0f} s (figures: what it measured before)"
        finally:
            self.current = None
        reader.join(timeout=5)
        return status, reason, "".join(tail)

    @staticmethod
    def stop(process: subprocess.Popen) -> None:
        process.terminate()
        try:
            process.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def write(self, name: str, record: dict) -> None:
        """Every record so far (RECORDS), then their summary: each atomically."""
        self.records[name] = record
        write_json(self.out / RECORDS, self.records)
        write_text(self.out / "summary.md", summary(self.records))
        print(f"[{record.get('part', name)}] {record['status']} in {record['duration_s']} s"
              + (f": {record['reason']}" if record.get("reason") else "") + f" -> {self.out / RECORDS}", flush=True)


def setup(suite: Suite, wheels: Path | None, site: Path) -> dict:
    """Install the carried wheels (offline, into `site`, which the parts import from), then
    record the machine the parts run on."""
    tick, budget = time.monotonic(), SETUP.dry_budget_s if suite.dry else SETUP.budget_s
    record = {"part": "0", "name": "setup", "settles": SETUP.settles, "budget_s": budget, **suite.common}
    status, problems = "passed", []
    if wheels is not None:
        files = sorted(glob.glob(str(wheels / "*.whl")))
        command = [PYTHON, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
                   "--upgrade", "--target", str(site), *files]
        done = subprocess.run(command, capture_output=True, text=True, timeout=budget)
        record["install"] = {"wheels": [Path(f).name for f in files],
                             "megabytes": round(sum(Path(f).stat().st_size for f in files) / 2 ** 20, 1),
                             "exit_status": done.returncode, "seconds": round(time.monotonic() - tick, 1)}
        if done.returncode:
            status = "failed"
            problems.append(f"pip install of {wheels} failed: {(done.stdout + done.stderr)[-1500:]}")
    else:
        record["install"] = "none: no --wheels given; the parts use what the machine has"
    probe = subprocess.run([PYTHON, "-c", ENVIRONMENT], capture_output=True, text=True, env={**os.environ, **suite.env},
                           cwd=REPO, timeout=max(30, budget))
    if probe.returncode:
        status = "failed"
        problems.append(f"the environment probe failed: {probe.stderr[-1500:]}")
    else:
        record["environment"] = json.loads(probe.stdout)
        packages = record["environment"]["packages"]
        if not packages["mlflow"]:
            suite.env["MASKBENCH_TRACKING"] = "off"
            record["tracking"] = ("off: MLflow is not installed here; the CLI parts (d, e, h) run with "
                                  "MASKBENCH_TRACKING=off and their metrics come from the runs' metrics.json")
        else:
            record["tracking"] = "MLflow, a SQLite store in the CLI parts' workspace"
        missing = [name for name in ("jsonschema", "rdkit") if not packages[name]]
        if missing:  # the CLI imports them: the parts that run it would fail
            status = "failed"
            problems.append(f"missing packages the CLI imports: {', '.join(missing)} (carry them: docs/benchmarks.md)")
        if not suite.dry and record["environment"]["device"] == "cpu":
            status = "failed"
            problems.append("no CUDA device: run with --dry on a CPU")
    record.update(status=status, duration_s=round(time.monotonic() - tick, 1))
    if problems:
        record["reason"] = "; ".join(problems)
    suite.common["device"] = record.get("environment", {}).get("device", "unknown")
    suite.common["tracking"] = record.get("tracking", "unknown")
    suite.write("setup", record)
    return record


# --- the figures as markdown -------------------------------------------------------------------------

NOT = "not measured"


def cell(value, fmt="{:,.3g}") -> str:
    if value is None:
        return NOT
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, (int, float)):
        return fmt.format(value)
    return str(value)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def figures_a(f: dict) -> list[str]:
    rows = []
    for name, e in f.items():
        if not isinstance(e, dict) or "B_M_L" not in e:
            continue
        err = e["error"]
        rows.append([name, " x ".join(map(str, e["B_M_L"])), cell(err["log_z"]["max_abs"], "{:.2g}"),
                     cell(err["grad_emit"]["max_rel"], "{:.2g}"), cell(err["grad_trans"]["max_rel"], "{:.2g}"),
                     cell(e["kernel"]["seconds_median"] * 1e3, "{:,.1f}"),
                     cell(e["reference"]["seconds_median"] * 1e3, "{:,.1f}"), cell(e["speedup"], "{:.1f}x"),
                     cell(e.get("within_tolerance"))])
    lines = [f"Kernel: {f.get('kernel', NOT)}.", "",
             *table(["size", "B x M x L", "log Z max abs error", "grad emit max rel error",
                     "grad trans max rel error", "kernel ms (fwd+bwd)", "reference ms", "speed-up",
                     "within 1e-4"], rows)]
    phases = {key: e for key, e in f.get("phases_ms", {}).items() if "kernel_forward" in e}
    if phases:
        columns = ("kernel_forward", "kernel_backward_recursion", "transition_gradient", "reference_forward",
                   "reference_backward")
        lines += ["", "Phases (ms; the old kernel's forward + backward: "
                  f"{json.dumps(f['phases_ms'].get('old_kernel_fwd_bwd_ms'))}):", "",
                  *table(["B x M x L", *columns, "speed-up"],
                         [[key, *(cell(e[c], "{:,.2f}") for c in columns), cell(e["speedup"], "{:.1f}x")]
                          for key, e in phases.items()])]
    if "pytest_gpu" in f:
        lines += ["", f"`{f['pytest_gpu']['command']}`: {f['pytest_gpu']['last_line'] or 'no output'}"]
    return lines


def figures_steps(f: dict) -> list[str]:
    settings = f.get("settings", {})
    compiled = settings.get("compiled")
    rows = []
    for name, e in f.items():
        if not isinstance(e, dict) or "tokens_per_s" not in e:
            continue
        row = [name, cell(e["tokens_per_s"], "{:,}"), cell(e["step_ms"], "{:,.1f}"), cell(e["tflop_per_s"], "{:,.3g}"),
               cell(e["mfu"], "{:.1%}"), cell(e["peak_memory_gib"], "{:.1f}")]
        if compiled:
            row += [cell(e["compile_s"], "{:.0f}"), cell(1 / e["mfu"] if e.get("mfu") else None, "{:.2f}x")]
        else:
            row += [cell(e["agreement"]["max_rel_diff"], "{:.2%}")]
        rows.append(row)
    header = ["objective", "tokens/s", "step ms", "TFLOP/s", "MFU", "peak GiB"]
    header += ["compile s", "step / FLOP time at peak"] if compiled else ["bf16 vs fp32 loss, max rel diff"]
    where = ", ".join(f"{k} {settings.get(k)}" for k in ("profile", "size", "batch", "seq_len", "vocab", "timed",
                                                         "compile_backend")
                      if settings.get(k) is not None)
    peak = settings.get("peak_bf16_tflops")
    mfu = f"MFU against {peak} TFLOP/s dense bf16" if peak else "MFU: no bf16 peak known for this device"
    return [f"Settings: {where}; {mfu}.", "", *table(header, rows)]


def figures_c(f: dict) -> list[str]:
    rows = []
    for run, e in f.items():
        if not isinstance(e, dict) or "estimate_gib" not in e:
            continue
        rows.append([run, f"{e['micro_batch']} x {e['seq_len']}", cell(e["estimate_gib"], "{:.1f}"),
                     cell(e.get("peak_allocated_gib"), "{:.1f}"), cell(e.get("peak_reserved_gib"), "{:.1f}"),
                     cell(e.get("fits"))])
    memory = f.get("device_memory_gib")
    return [f"Device memory: {memory:.1f} GiB." if memory else "Device memory: not measured.", "",
            *table(["run (paper profile)", "micro-batch x tokens", "plan's estimate GiB", "peak allocated GiB",
                    "peak reserved GiB", "fits"], rows)]


def figures_cli(f: dict) -> list[str]:
    rows = []
    for key, e in f.items():
        if not isinstance(e, dict) or "command" not in e:
            continue
        shown = {k: v for k, v in e.items() if k not in ("command", "exit_status", "seconds", "output_tail")}
        rows.append([f"`{e['command']}`", cell(e["exit_status"]), cell(e["seconds"], "{:.0f}"),
                     ", ".join(f"{k} {cell(v)}" for k, v in shown.items()) or NOT])
    head = [f"Workspace: {json.dumps(f['workspace'])}", ""] if "workspace" in f else []
    return head + table(["command", "exit", "s", "figures"], rows)


def figures_g(f: dict) -> list[str]:
    by_stage: dict[str, list[float]] = {}
    for job in f.get("jobs", []):
        by_stage.setdefault(job["stage"], []).append(job["seconds"])
    rows = [[stage, str(len(times)), cell(sum(times), "{:,.1f}"), cell(max(times), "{:,.1f}")]
            for stage, times in by_stage.items()]
    stopped = " (stopped at its budget)" if f.get("timed_out") else ""
    return [f"Profile {f.get('profile')}: build exit status {f.get('exit_status')}{stopped} in "
            f"{cell(f.get('build_seconds'))} s; the table: lease-table.md.", "",
            *table(["stage", "jobs", "s in all", "longest s"], rows)]


def figures_h(f: dict) -> list[str]:
    profile = f.get("profile")
    if not isinstance(profile, dict):
        return figures_cli(f)
    rows = [[f"`{r['name']}`", cell(r["calls_per_step"]), cell(r["self_ms_per_step"], "{:,.2f}"),
             cell(r["share"], "{:.1%}")] for r in profile["rows"]]
    return [*figures_cli(f), "", f"Top {profile['sorted_by']} over {profile['steps']} steps "
            f"({cell(profile['total_ms_per_step'], '{:,.1f}')} ms a step in all):", "",
            *table(["operator / kernel", "calls a step", "ms a step", "share"], rows)]


def figures_e(f: dict) -> list[str]:
    rate = f.get("finetune_rate")
    if not rate:
        return figures_cli(f)
    return [*figures_cli(f), "", f"Fine-tuning `{rate['run']}`: {cell(rate['rows_per_s'], '{:,.0f}')} rows/s over its "
            f"steps; the plan's {cell(rate['plan_gflop'], '{:,.0f}')} GFLOP of the job in its "
            f"{cell(rate['seconds_after_startup'], '{:.1f}')} s after start-up: "
            f"{cell(rate['tflop_per_s_plan_count'], '{:.3g}')} TFLOP/s (the rate the plan prices)."]


RENDER = {"a": figures_a, "b": figures_steps, "c": figures_c, "d": figures_cli, "e": figures_e, "f": figures_steps,
          "g": figures_g, "h": figures_h}


def summary(records: dict[str, dict]) -> str:
    """The records as markdown: the machine, then each part's status and figures."""
    setup_record = records.get("setup", {})
    env = setup_record.get("environment", {})
    first = next(iter(records.values()))
    dry = first.get("mode") == "dry"
    lines = [f"# GPU suite: {env.get('device', 'unknown device')}"
             + (" (DRY RUN on a CPU: no GPU figures)" if dry else ""),
             "",
             f"- date (UTC): {first.get('started')}; mode: {first.get('mode')}",
             f"- commit: {first.get('git_commit')} (dirty: {cell(first.get('git_dirty'))}); source digest "
             f"{first.get('source_digest')}",
             f"- torch {env.get('torch')}, CUDA {env.get('cuda')}, CuPy {env.get('cupy')}, Python {env.get('python')}",
             f"- install: {json.dumps(setup_record.get('install'))[:300]}",
             f"- tracking: {setup_record.get('tracking')}", ""]
    for name, record in records.items():
        title = f"## {record.get('part')} {record.get('name')}: {record['status']}"
        lines += [title, "", f"{record.get('settles')}. {record.get('duration_s')} s of a {record.get('budget_s')} s "
                  "budget." + (f" **{record['reason']}**" if record.get("reason") else ""), ""]
        figures = record.get("figures")
        render = RENDER.get(record.get("part"))
        if render and figures:
            try:
                lines += render(figures) + [""]
            except (KeyError, TypeError, ValueError) as exc:  # a partial record: say so, keep the rest
                lines += [f"(figures could not be tabulated: {type(exc).__name__}: {exc}; see the JSON)", ""]
        if figures and figures.get("left_out_for_budget"):
            lines += [f"Left out for lack of budget: {', '.join(figures['left_out_for_budget'])}.", ""]
    return "\n".join(lines)


def read_records(folder: Path) -> dict[str, dict]:
    """A records folder's records in the suite's order: RECORDS as a lease returns it, or one
    file per record (setup.json, part-<letter>.json) as collect commits them."""
    names = ["setup"] + [f"part-{p.letter}" for p in PARTS]
    if (folder / RECORDS).exists():
        bundled = json.loads((folder / RECORDS).read_text())
        return {name: bundled[name] for name in names if name in bundled}
    return {name: json.loads((folder / f"{name}.json").read_text()) for name in names
            if (folder / f"{name}.json").exists()}


def collect(folder: Path, into: Path = REPO / "benchmarks/results/gpu") -> Path:
    """Copy a records folder (what a lease sent back) to `into`/<date>-<device>/, one file per
    record, with what the parts returned and the summary rebuilt: what is committed. A second
    command of the same lease adds its records to the same folder."""
    records = read_records(folder)
    if not records:
        raise SystemExit(f"{folder}: no records ({RECORDS}, or setup.json and part-<letter>.json) to collect")
    first = next(iter(records.values()))
    device = records.get("setup", {}).get("environment", {}).get("device", "unknown")
    name = "-".join(filter(None, [str(first.get("started", "undated"))[:10],
                                  "".join(c if c.isalnum() else "-" for c in device.lower()).strip("-"),
                                  "dry" if first.get("mode") == "dry" else None]))
    dest = into / name
    if records.get("setup") and (dest / "setup.json").exists():  # the lease's first command's setup stays
        records["setup-2"] = records.pop("setup")
    for key, record in records.items():
        write_json(dest / f"{key}.json", record)
        for returned in record.get("returned", []):
            write_text(dest / returned, (folder / returned).read_text())
    write_text(dest / "summary.md", summary(read_records(dest)))
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", help="comma-separated letters of the parts to run, in the suite's order (default: "
                                        "all; a lease runs the commands --plan prints)")
    parser.add_argument("--dry", action="store_true", help="every part on the CPU, tiny, with CPU stand-ins")
    parser.add_argument("--out", type=Path, default=os.environ.get("OUT") or None,
                        help="the records folder (default: $OUT, the folder a lent machine sends back)")
    parser.add_argument("--wheels", type=Path, help="a folder of wheels to install offline first (the carried one)")
    parser.add_argument("--site", type=Path, default=Path(tempfile.gettempdir()) / "gpu-suite-site",
                        help="where --wheels installs (put on the parts' PYTHONPATH)")
    parser.add_argument("--commit", help="the git commit of the tree, where the copied tree has no .git")
    parser.add_argument("--plan", action="store_true", help="print the parts and their budgets, run nothing")
    parser.add_argument("--table", type=Path, metavar="DIR", help="print the summary of a records folder, run nothing")
    parser.add_argument("--collect", type=Path, metavar="DIR",
                        help="copy a records folder into benchmarks/results/gpu/<date>-<device>/ to commit, "
                             "run nothing")
    args = parser.parse_args()
    letters = [x.strip() for x in (args.parts or ",".join(BY_LETTER)).split(",") if x.strip()]
    unknown = [x for x in letters if x not in BY_LETTER]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}; the parts are "
                     + ", ".join(f"{p.letter} ({p.name})" for p in PARTS))
    parts = [p for p in PARTS if p.letter in letters]
    if args.plan:
        print("\n".join(plan_lines(parts if args.parts else None)))
        return 0
    if args.table:
        print(summary(read_records(args.table)))
        return 0
    if args.collect:
        print(f"records and summary in {collect(args.collect)}")
        return 0
    if args.out is None:
        parser.error("--out is needed where $OUT is not set")
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"--out {args.out} already holds records: give an empty or new folder")
    args.out.mkdir(parents=True, exist_ok=True)

    common = {"mode": "dry" if args.dry else "device",
              "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              **git_commit(args.commit)}
    paths = [str(REPO / "src"), *([str(args.site)] if args.wheels else []), os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(p for p in paths if p), "PYTHONUNBUFFERED": "1"}
    suite = Suite(args.out, args.dry, env, common, args.wheels.resolve() if args.wheels else None)

    def stopped(signum, frame):  # the lease's timeout or a user: end the running part, keep its figures
        suite.interrupted = signum
        if suite.current is not None:
            suite.current.terminate()
    signal.signal(signal.SIGTERM, stopped)

    tick = time.monotonic()
    first = setup(suite, args.wheels, args.site)
    failed = [] if first["status"] == "passed" else ["setup"]
    for part in parts:
        if suite.interrupted:
            break
        if failed == ["setup"]:
            suite.write(f"part-{part.letter}", {"part": part.letter, "name": part.name, "settles": part.settles,
                                                "status": "not run", "duration_s": 0, "reason": "setup failed",
                                                **common})
            continue
        if suite.run_part(part)["status"] != "passed":
            failed.append(part.letter)
        if suite.interrupted:
            print(f"suite stopped by signal {suite.interrupted}; records so far in {args.out}", flush=True)
            return 128 + suite.interrupted
    print(f"suite done in {time.monotonic() - tick:.0f} s; records in {args.out}"
          + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
