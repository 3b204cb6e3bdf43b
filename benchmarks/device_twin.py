"""A CPU twin of the lent GPU machine: the GPU suite's dry run where only the machine's packages
and what travels with the tree are there, installed as the lease installs them.

    python benchmarks/device_twin.py              # exit status 0: every part of the suite passed

1. A virtual environment (no system site-packages) holding the machine's package set
   (`DEVICE_PACKAGES`: what its image has of what the suite imports; torch as the CPU build),
   cached under ~/.cache/maskbench-device-twin/ by the list's digest: made once, minutes.
2. A copy of the tree as the lease sends it (tracked files and untracked ones git does not
   ignore; no .git), with the carried wheels of benchmarks/carried.txt in `.whl`. This machine's
   Python is 3.11, the lent one's 3.12, so the wheels are the same list for this Python
   (benchmarks/carry.py --python-version): what is checked is that the list is complete.
3. `gpu_suite.py --dry --wheels .whl` in the copy, offline install included, then checks that
   every part passed, that at most 8 files came out (the lease's limit), and that the records
   say what ran without what (MLflow absent: tracking off).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from carry import download  # noqa: E402
from gpu_suite import PARTS  # noqa: E402

# The lent machine's packages the suite's parts import (/work/.library/device/KINDS.md lists its
# image), at the versions seen there where known; torch is this machine's CPU build of the same
# API (the lent one: 2.11 with CUDA 13). Not CuPy: without a GPU it has nothing to run.
DEVICE_PACKAGES = ["torch==2.13.0", "numpy", "pyyaml", "transformers==5.17.0", "tokenizers==0.23.2",
                   "safetensors==0.8.0", "pandas", "scikit-learn", "scipy", "pytest", "tqdm", "filelock", "attrs", "pillow",
                   "typing-extensions"]
MAX_FILES = 8  # what the lease sends back from $OUT


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(json.dumps([DEVICE_PACKAGES, sys.version_info[:2]]).encode()).hexdigest()[:12]
    return base / "maskbench-device-twin" / key


def environment(cache: Path) -> Path:
    """The twin's Python, its environment made once (then reused) from DEVICE_PACKAGES."""
    venv, done = cache / "venv", cache / "venv.done"
    python = venv / "bin" / "python"
    if done.exists() and python.exists():
        return python
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *DEVICE_PACKAGES],
                   check=True)
    done.write_text("\n".join(DEVICE_PACKAGES) + "\n")
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
    for name in ["setup", *(f"part-{p.letter}" for p in PARTS)]:
        path = out / f"{name}.json"
        if not path.exists():
            problems.append(f"{name}.json missing")
            continue
        record = json.loads(path.read_text())
        if record["status"] != "passed" or record["mode"] != "dry":
            problems.append(f"{name}: {record['status']} ({record.get('reason')}), mode {record['mode']}")
    setup = json.loads((out / "setup.json").read_text()) if (out / "setup.json").exists() else {}
    if setup and not str(setup.get("tracking", "")).startswith("off"):
        problems.append(f"MLflow is not among the machine's packages, yet tracking was {setup.get('tracking')!r}")
    if setup and not isinstance(setup.get("install"), dict):
        problems.append("the carried wheels were not installed")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="work here and keep the copy and records (default: a temporary folder)")
    args = parser.parse_args()
    cache = cache_dir()
    python = environment(cache)
    work = args.keep or Path(tempfile.mkdtemp(prefix="device-twin-"))
    tree, out = work / "tree", work / "out"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    copy_tree(tree)
    wheels = cache / f"wheels-py{sys.version_info.major}.{sys.version_info.minor}"
    print(f"carried wheels for this Python: {download(wheels, f'{sys.version_info.major}.{sys.version_info.minor}'):.1f} MiB",
          flush=True)
    shutil.copytree(wheels, tree / ".whl")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "OUT")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run([str(python), "benchmarks/gpu_suite.py", "--dry", "--wheels", ".whl", "--site",
                           str(work / "site"), "--commit", commit or "unknown", "--out", str(out)], cwd=tree, env=env)
    problems = check(out, done.returncode)
    print("\n".join(["device twin:", *problems] if problems else [f"device twin: every part passed; records in {out}"]))
    if not args.keep and not problems:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
