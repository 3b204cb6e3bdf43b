"""The analysis stage's files, as the mechanism tables read them.

`maskbench analyse --run R` writes four files per run (maskbench.paths ANALYSIS_*): corrupted
semantics, prediction entropy, effective rank, the ExLM case study. Each is always written;
one that does not apply to the run's objective holds `{"applies": false, "why": ...}`. A table
asks for one measure of one run and gets the file's contents, or the words its cell shows
instead: "not computed (no …)" for a missing file, "does not apply (…)" otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

from maskbench import paths
from maskbench.stages import reading

MEASURES = {"corruption": paths.ANALYSIS_CORRUPTION, "entropy": paths.ANALYSIS_ENTROPY,
            "effective_rank": paths.ANALYSIS_RANK, "case_study": paths.ANALYSIS_CASE_STUDY}


def read_measure(root: Path, run: str, measure: str) -> dict | str:
    """The run's `measure` where it applies, or why a cell cannot show it."""
    path = Path(root) / MEASURES[measure].format(run=run)
    if not path.exists():
        return f"not computed (no {MEASURES[measure].format(run=run)})"
    with reading(path):
        found = json.loads(path.read_text())
    if not found.get("applies", False):
        return f"does not apply ({found.get('why', 'no reason given')})"
    return found
