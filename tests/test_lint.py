"""The code base passes ruff (configured in pyproject.toml), so CI fails on a lint error like any other test.

Snakefile and the .smk rules are Snakemake's language, not Python, so ruff does not read them.
"""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON_DIRS = ("src", "tests", "benchmarks")


def test_ruff_reports_no_violation():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *PYTHON_DIRS],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, f"ruff check {' '.join(PYTHON_DIRS)} failed:\n{result.stdout}{result.stderr}"
