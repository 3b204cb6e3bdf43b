"""The analysis stage's files, as the mechanism tables read them.

`maskbench analyse --run R` writes five files per run (the analyse stage's outputs): corrupted
semantics, prediction entropy, effective rank, the ExLM case study and ExLM's alignment. Each is
always written; one that does not apply to the run's objective holds `{"applies": false, "why": ...}`. A table
asks for one measure of one run and gets the file's contents, or `Missing` with the words its cell
shows instead: "not computed (no …)" for a missing file, "does not apply (…)" otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

from maskbench import paths
from maskbench.io import reading
from maskbench.report.cells import learned_gap
from maskbench.report.missing import Missing

MEASURES = paths.OUTPUTS["analyse"]  # measure -> path pattern: corruption, entropy, rank, case_study, alignment


def read_measure(root: Path, run: str, measure: str) -> dict | Missing:
    """The run's `measure` where it applies, or why a cell cannot show it."""
    path = Path(root) / MEASURES[measure].format(run=run)
    if not path.exists():
        return Missing(f"not computed (no {MEASURES[measure].format(run=run)})")
    with reading(path):
        found = json.loads(path.read_text())
    if not found.get("applies", False):
        return Missing(f"does not apply ({found.get('why', 'no reason given')})")
    return found


def own_mask_gap(run: str, record: dict | Missing, metrics: dict | Missing, field: str = "nll") -> float | Missing:
    """How far below its corpus's unigram loss (`metrics`, the run's pretraining metrics) the
    run predicts masked tokens on the masks its objective draws, in nats, or why it is not known:
    `field` of an analysis record, the entropy record's `nll` (the fully masked tokens its
    entropy is measured on) or the alignment record's `dag_nll` (ExLM's DAG likelihood, read
    with its `transition_floor` added back, as `learned_gap` reads pretraining's).
    Not pretraining's validation loss: that input (15 % of tokens with every copy masked, nothing
    else) is not the one a Repeated MLM, or a run at another ratio, trained on."""
    for found in (record, metrics):
        if isinstance(found, Missing):
            return found
    for needed in (field, *(("transition_floor",) if field == "dag_nll" else ())):  # never read as 0
        if needed not in record:
            return Missing(f"no {needed} in the analysis of `{run}`; re-run `maskbench analyse --run {run}`")
    if metrics.get("unigram_loss") is None:
        return Missing(f"the pretraining metrics of `{run}` have no unigram_loss")
    floor = record["transition_floor"] if field == "dag_nll" else 0.0
    return metrics["unigram_loss"] - record[field] + floor


def learned_cell(gap: float | Missing, metrics: dict | Missing) -> str:
    """The gap on the run's own masks (`own_mask_gap`), and beside it the validation loss's (`learned_gap`)."""
    if isinstance(gap, Missing):
        return str(gap)
    validation = learned_gap(metrics) if isinstance(metrics, dict) and "unigram_gap" in metrics else None
    return f"{gap:.2f}" + ("" if validation is None else f" ({validation:.2f})")
