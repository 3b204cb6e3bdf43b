"""Files dated in the future (`maskbench.clock`): named as clock skew before Snakemake deletes
good outputs over them, with a way out that a test runs and that loses no content."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from maskbench.clock import clock_skew_error
from tests.helpers import copy_workflow


def checksums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def build_from_the_future(root: Path) -> None:
    """Two outputs built, one dated a day ahead (a copy from a machine whose clock ran ahead)."""
    for name in ("data/cards/download-moses.json", "reports/table1.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    ahead = time.time() + 86400
    os.utime(root / "data/cards/download-moses.json", (ahead, ahead))


def test_future_files_are_named_as_clock_skew_and_the_advice_fixes_them_losing_nothing(tmp_path):
    assert clock_skew_error(tmp_path) is None  # nothing built yet
    build_from_the_future(tmp_path)
    before = checksums(tmp_path)
    message = clock_skew_error(tmp_path)
    assert message.startswith("clock skew: 1 file(s) under data/, runs/, reports/ are dated after this machine's "
                              "clock (") and "\n  data/cards/download-moses.json (" in message
    advice = message.split("date them now, which loses no content: `")[1].split("`")[0]
    assert advice == "find data reports -newermt now -exec touch -h {} +"
    subprocess.run(advice, shell=True, cwd=tmp_path, check=True)
    assert clock_skew_error(tmp_path) is None and checksums(tmp_path) == before


@pytest.mark.slow
def test_snakemake_stops_on_clock_skew_before_any_job(tmp_path):
    root = copy_workflow(tmp_path / "w")
    build_from_the_future(root)
    before = checksums(root / "data") | checksums(root / "reports")
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "reports/table1.md"], cwd=root,
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root / "src")})
    assert result.returncode != 0 and "clock skew: 1 file(s)" in result.stderr + result.stdout
    assert checksums(root / "data") | checksums(root / "reports") == before
