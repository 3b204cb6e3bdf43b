"""One build at a time in a workspace, whichever tool starts it.

Snakemake refuses a second Snakemake, DVC a second DVC, but neither knew of the other: `dvc
repro` rebuilt `runs/pretrain/mlm/model` under a fine-tuning job Snakemake was running. So:

- Snakemake takes the workspace lock (`paths.WORKSPACE_LOCK`, an flock the kernel releases
  when its holder dies, even by kill -9) when it starts its jobs (the Snakefile's `onstart`),
  after checking that DVC holds no lock of its own here (`.dvc/tmp/lock`, held by `dvc repro`
  and `dvc exp run` for their whole run);
- every `maskbench <stage>` command, which is what DVC's stages run, takes it for its run;
  `maskbench validate --stamp`, DVC's first stage, too, before DVC removes any output.

The holder names itself in the lock file; a command started by the holder (a Snakemake job, a
pretraining run's processes) finds the holder's pid in `HOLDER_ENV` and runs under its lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

from maskbench import paths

HOLDER_ENV = "MASKBENCH_WORKSPACE_HOLDER"  # the pid of the build a process runs under
DVC_LOCK = ".dvc/tmp/lock"  # DVC's repository lock (zc.lockfile: an flock, the holder's pid inside)
_held = []  # the open lock file of this process: closing it (at exit) releases the lock


class Busy(RuntimeError):
    """Another build holds the workspace."""


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return "?"


def _wait_hint(pid: int) -> str:
    return f"wait for it to end (`while kill -0 {pid} 2>/dev/null; do sleep 10; done`), then run again"


def _dvc_holder(root: Path) -> int | None:
    """The pid of a DVC command holding its repository lock here, or None."""
    lock = root / DVC_LOCK
    if not lock.exists():
        return None
    with open(lock, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            text = f.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(f, fcntl.LOCK_UN)
    return None


def acquire(tool: str, root: Path = Path("."), check_dvc: bool = False) -> None:
    """Hold the workspace lock for this process's life, as `tool`; raise Busy naming the build
    that holds it. A process started under the holder's lock (HOLDER_ENV) runs under it."""
    if check_dvc and (pid := _dvc_holder(root)) is not None:
        who = f"pid {pid}, `{_command(pid)}`" if pid > 0 else "its pid unknown"
        raise Busy(f"dvc is running in this workspace ({who}, holding {DVC_LOCK}); {tool} would rebuild files it "
                   f"reads or writes: {_wait_hint(pid) if pid > 0 else 'wait for it to end, then run again'}")
    path = root / paths.WORKSPACE_LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        try:
            holder = json.loads(f.read())
        except ValueError:
            holder = {}
        f.close()
        pid = holder.get("pid", -1)
        if str(pid) == os.environ.get(HOLDER_ENV):
            return  # a job of the build that holds it
        raise Busy(f"{holder.get('tool', 'another build')} is running in this workspace (pid {pid}, "
                   f"`{holder.get('command', '?')}`, since {holder.get('since', '?')}); {tool} would rebuild files "
                   f"it reads or writes: {_wait_hint(pid)}") from None
    f.seek(0)
    f.truncate()
    f.write(json.dumps({"tool": tool, "pid": os.getpid(), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
                        "since": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
    f.flush()
    _held.append(f)
    os.environ[HOLDER_ENV] = str(os.getpid())  # what this process starts runs under its lock
