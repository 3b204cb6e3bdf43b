"""The analysis stage's files, as the mechanism tables read them.

`maskbench analyse --run R` writes five files per run (the analyse stage's outputs): corrupted
semantics, prediction entropy, effective rank, the ExLM case study and ExLM's alignment. Each is
always written; one that does not apply to the run's objective holds `{"applies": false, "why": ...}`. A table
asks for one measure of one run and gets the file's contents, or the words its cell shows
instead: "not computed (no …)" for a missing file, "does not apply (…)" otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

from maskbench.stages import STAGES, reading

MEASURES = STAGES["analyse"].outputs  # measure -> path pattern: corruption, entropy, rank, case_study, alignment


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
