"""A CPU twin of the lent GPU machine: the GPU suite's dry run where only the machine's packages
and what travels with the tree are there, installed as the lease installs them.

    python benchmarks/device_twin.py              # exit status 0: every part of the suite passed

1. A virtual environment (no system site-packages) that can import the machine's package set
   and nothing else: `DEVICE_PACKAGES` (what its image has of what the suite imports) and the
   packages they require, linked from this Python's installed ones (torch as the CPU build), in
   seconds, with no download. Versions are this environment's, not the image's (KINDS.md lists
   those); what is checked is that nothing outside the set is needed.
2. A copy of the tree as the lease sends it (tracked files and untracked ones git does not
   ignore; no .git), with the carried wheels of benchmarks/carried.txt in `.whl`. This machine's
   Python is 3.11, the lent one's 3.12, so the wheels are the same list for this Python
   (benchmarks/carry.py --python-version): what is checked is that the list is complete.
3. `gpu_suite.py --dry --wheels .whl` in the copy, offline install included, then checks that
   every part passed, that at most 8 files came out (the lease's limit), and that the records
   say what ran without what (MLflow absent: tracking off). Every part but the lease table (g),
   whose twin, with its own prepared folder, is tests/test_lease_table.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from carry import download  # noqa: E402
from gpu_suite import PARTS, RECORDS  # noqa: E402

TWINNED = [p.letter for p in PARTS if p.letter != "g"]  # g: tests/test_lease_table.py builds its .lease

# The lent machine's packages the suite's parts import (/work/.library/device/KINDS.md lists its
# image). Not CuPy: without a GPU it has nothing to run.
DEVICE_PACKAGES = ["torch", "numpy", "pyyaml", "transformers", "tokenizers", "safetensors", "pandas", "scikit-learn",
                   "scipy", "pytest", "tqdm", "filelock", "attrs", "pillow", "typing-extensions", "pip"]
MAX_FILES = 8  # what the lease sends back from $OUT


def closure(names: list[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions of `names` and of everything they require (extras left out),
    as pip would have installed them on a machine holding only `names`."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        requirement = Requirement(todo.pop())
        key = requirement.name.lower().replace("_", "-")
        if key in found:
            continue
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        found[key] = metadata.distribution(requirement.name)
        todo.extend(found[key].requires or [])
    return found


def environment(work: Path, packages: list[str] = DEVICE_PACKAGES) -> Path:
    """The twin's Python: a venv whose site-packages reaches, through one .pth file, a folder of
    links to the files of `closure(packages)` and no other installed package."""
    venv, linked = work / "venv", work / "device-packages"
    shutil.rmtree(venv, ignore_errors=True)
    shutil.rmtree(linked, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    linked.mkdir(parents=True)
    for dist in closure(packages).values():
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (linked / top).exists() and top != "__pycache__":
                (linked / top).symlink_to(source)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "device-packages.pth").write_text(f"{linked}\n")
    return python


def copy_tree(dest: Path) -> None:
    """What the lease sends: tracked files and untracked files git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def check(out: Path, exit_status: int) -> list[str]:
    """What the twin's run must show; each problem as a line."""
    problems = [] if exit_status == 0 else [f"the suite exited with {exit_status}"]
    files = [p for p in out.rglob("*") if p.is_file()]
    if len(files) > MAX_FILES:
        problems.append(f"{len(files)} files in the records folder, over the lease's {MAX_FILES}")
    records = json.loads((out / RECORDS).read_text()) if (out / RECORDS).exists() else {}
    for name in ["setup", *(f"part-{letter}" for letter in TWINNED)]:
        if name not in records:
            problems.append(f"{name} missing from {RECORDS}")
            continue
        record = records[name]
        if record["status"] != "passed" or record["mode"] != "dry":
            problems.append(f"{name}: {record['status']} ({record.get('reason')}), mode {record['mode']}")
    setup = records.get("setup", {})
    if setup and not str(setup.get("tracking", "")).startswith("off"):
        problems.append(f"MLflow is not among the machine's packages, yet tracking was {setup.get('tracking')!r}")
    if setup and not isinstance(setup.get("install"), dict):
        problems.append("the carried wheels were not installed")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path,
                        help="work here and keep the copy and records (default: a temporary folder)")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="device-twin-"))
    python = environment(work)
    tree, out = work / "tree", work / "out"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    copy_tree(tree)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "maskbench-device-twin"
    wheels = cache / f"wheels-py{sys.version_info.major}.{sys.version_info.minor}"
    print("carried wheels for this Python: "
          f"{download(wheels, f'{sys.version_info.major}.{sys.version_info.minor}'):.1f} MiB",
          flush=True)
    shutil.copytree(wheels, tree / ".whl")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "OUT")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run([str(python), "benchmarks/gpu_suite.py", "--dry", "--parts", ",".join(TWINNED), "--wheels",
                           ".whl", "--site", str(work / "site"), "--commit", commit or "unknown", "--out", str(out)],
                          cwd=tree, env=env)
    problems = check(out, done.returncode)
    print("\n".join(["device twin:", *problems] if problems else [f"device twin: every part passed; records in {out}"]))
    if not args.keep and not problems:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
