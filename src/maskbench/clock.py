"""Files dated in the future: clock skew, named before Snakemake acts on it.

Snakemake re-runs a job whose input is newer than its output. A file whose modification time
lies ahead of this machine's clock (copied from a machine whose clock runs ahead, a restored
backup, a clock set back) keeps reading as newer than whatever is built after it: Snakemake
deletes good outputs to rebuild them, and does so on every run until the clock catches up,
naming no cause. The Snakefile stops first, naming the files and the way out.
"""

from __future__ import annotations

import time
from pathlib import Path

WATCHED = ("data", "runs", "reports")  # the workflow's inputs and outputs
SLACK_S = 60  # a shared filesystem's clock may differ from ours by seconds; not by minutes
SHOWN = 5


def future_files(root: Path, now: float | None = None) -> list[tuple[Path, float]]:
    """Files under `root`'s WATCHED folders dated more than SLACK_S after `now`, newest first."""
    limit = (time.time() if now is None else now) + SLACK_S
    found = [(p, p.lstat().st_mtime) for folder in WATCHED if (root / folder).is_dir()
             for p in (root / folder).rglob("*") if p.is_file() and p.lstat().st_mtime > limit]
    return sorted(found, key=lambda item: -item[1])


def clock_skew_error(root: Path = Path("."), now: float | None = None) -> str | None:
    """The message for files from the future under `root`, or None if there are none."""
    found = future_files(root, now)
    if not found:
        return None
    stamp = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))  # noqa: E731
    named = "\n  ".join(f"{p.relative_to(root)} ({stamp(t)})" for p, t in found[:SHOWN])
    more = f"\n  ... and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    folders = " ".join(d for d in WATCHED if (root / d).is_dir())
    return (f"clock skew: {len(found)} file(s) under {', '.join(f'{d}/' for d in WATCHED)} are dated after this "
            f"machine's clock ({stamp(time.time() if now is None else now)}):\n  {named}{more}\n"
            "Snakemake would read them as newer than anything built after them, and delete and rebuild good outputs "
            "on every run until the clock catches up. If this machine's clock is wrong, set it right; if the files "
            "came dated ahead (a copy from another machine), date them now, which loses no content: "
            f"`find {folders} -newermt now -exec touch -h {{}} +`; then run snakemake again.")
