"""table5: the ablations of ExLM (Tab. 2, 13) and MAE-LM (Tab. 2, Fig. 4).

One row per entry of `tables.<t>.rows`: a base run (ExLM, Vanilla MLM, MAE-LM) or an ablation
of one, which differs from its base in the settings it names and nothing else (validation,
`maskbench.config.ablation_errors`), with its `label` beside its id where it has one (whose
reading of a paper's ablation a row is: this project's, or the official code's). Each task cell is table1's cell (score
± std over seeds, †
where the run is not better than the `none` control beyond the noise), and for an ablation its
paired-bootstrap comparison with its base row on the same task: "▲" better than the base beyond
the noise, "▼" worse, "≈" not decided. Beside each row, the papers' numbers for it
(published.yaml `ablations`, keyed by row id), which set the scale: they are base-size text
models on GLUE.

Each claim of published.yaml decided by this kind (`decided_by: ablations`) names pairs of rows
(`pairs: [[better, than], ...]`); every pair is compared on the claim's parts (the mean of the
tasks both rows are fine-tuned on, and each task listed `apart`), all parts decided together by
Holm's rule (`published.family_verdict`); a `trend` reads its chain on each part
(`trend_reading`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from maskbench.config import position_scheme, resolved_run, table_rows
from maskbench.eval.verdict import A_BETTER, B_BETTER
from maskbench.report import markdown
from maskbench.report.cells import LEARNING, control_lines, learning_cell
from maskbench.report.evidence import TaskEvidence
from maskbench.report.footer import closing_lines
from maskbench.report.knobs import knobs_text
from maskbench.report.missing import Missing
from maskbench.report.published import (Part, Rendered, claims_decided_by, decided_sides, family_verdict,
                                        load_published, pair_parts, rule, shape_of, stands_apart)
from maskbench.report.table import TASKS, Table, TableKind, read_table

CARD = TableKind(
    name="ablations", label="ablations",
    columns=("row", "run", "objective", "ablates", "knobs", "positions", TASKS, "paper (base size, GLUE dev, %)",
             LEARNING),
    caption=("Profile `{profile}`. One row per base run and per ablation of one; an ablation differs "
             "from its base row only in the settings `ablates` names (checked when params.yaml is read). Scores "
             "in % (RMSE as is) over fine-tuning seeds as each column says. "
             "{did_not_learn}: not better than the `none` control beyond the noise. Against its base row on "
             "the same task: ▲ better beyond the noise, "
             "▼ worse, ≈ not decided (paired bootstrap, below). `paper`: the papers' numbers for the row, which "
             "set the scale only (base-size text models)."),
    claims="Claims of the papers, checked on our rows:")
AGAINST_BASE = {A_BETTER: "▲", B_BETTER: "▼"}  # else "≈": not decided


def change_text(config: dict, row: dict, rows: dict) -> str:
    """"of `exlm`: knobs.rope2d True → False" for each setting an ablation changes; "base" for a base row."""
    if "of" not in row:
        return "base"
    mine, base = resolved_run(config, row["run"]), resolved_run(config, rows[row["of"]]["run"])
    return f"of `{row['of']}`: " + ", ".join(f"{key} {base.get(key, '(default)')} → {mine.get(key, '(default)')}"
                                            for key in row["changes"])


def published_text(config: dict, row_id: str, row: dict, rows: dict) -> str:
    """The papers' numbers for a row ("ExLM Tab. 2: MNLI 85.1, ..."), "—" where none give any.
    Where a source states what its row changes (`changes`: setting -> [base, row]), that change
    is named, and so is this profile's own where it differs (the numbers then measure another
    change: MAE-LM Tab. 2's decoder 4 → 2 beside a 1 → 2 row)."""
    parts = []
    for source in load_published()["ablations"].values():
        numbers = source["rows"].get(row_id)
        if numbers:
            shown = ", ".join(f"{key.upper() if key != 'avg' else 'avg'} {value:.1f}" for key, value in numbers.items())
            change = paper_change(config, source, row_id, row, rows)
            parts.append(f"{source['citation'].split(' (')[0]}{change}: {shown}")
    return "; ".join(parts) or "—"


def paper_change(config: dict, source: dict, row_id: str, row: dict, rows: dict) -> str:
    """" (decoder_layers 4 → 2)" for the change a source's row makes, with ", here 1 → 2:
    another change" where this profile's row makes another; "" where the source states none."""
    theirs = source.get("changes", {}).get(row_id)
    if not theirs:
        return ""
    mine = {}
    if "of" in row:
        now, base = resolved_run(config, row["run"]), resolved_run(config, rows[row["of"]]["run"])
        mine = {key: [base.get(key), now.get(key)] for key in theirs}
    said = ", ".join(f"{key.removeprefix('knobs.')} {a} → {b}" for key, (a, b) in theirs.items())
    if mine == theirs:
        return f" ({said})"
    here = ", ".join(f"{key.removeprefix('knobs.')} {a} → {b}" for key, (a, b) in mine.items()) or "not an ablation"
    return f" ({said}; here {here}: another change)"


def against_base(evidence: TaskEvidence, run: str, base: str) -> str:
    found = evidence.compare(run, base)
    if isinstance(found, Missing):
        return " (vs base: not computed)"
    return f" {AGAINST_BASE.get(found.outcome, '≈')}"


def claim_verdict(config: dict, table: str, claim: dict, evidence: dict[str, TaskEvidence]) -> str:
    """The claim's row pairs, each compared on the claim's statistic (the papers' averages:
    `statistic: mean`), every part of every pair decided together by Holm's rule
    (`published.family_verdict`), or why it cannot be said (a row missing from this profile's
    table: not checked; a file missing: not computed). A `trend` claim (its pairs a chain:
    δ = 0 → 0.25 → ... → 1) also compares the chain's two ends, and reads by the chain on each
    of its parts (`trend_reading`): one neighbouring pair is no trend."""
    rows = table_rows(config, table)
    missing = sorted({r for pair in claim["pairs"] for r in pair if r not in rows})
    if missing:
        return f"not checked: the table has no row {', '.join(missing)}"
    ends = [claim["pairs"][0][0], claim["pairs"][-1][1]]
    parts, unlearned = [], []
    for better, than in ([ends] if claim.get("trend") else []) + claim["pairs"]:
        found = pair_parts(config, table, rows[better]["run"], rows[than]["run"], evidence, claim)
        if isinstance(found, Missing):
            return str(found)
        parts += [replace(part, better=better, than=than) for part in found[0]]
        unlearned += [f"{task} (`{better}` vs `{than}`)" for task in found[1]]
    outcome, family, shown = family_verdict(config, parts, named=True)
    if claim.get("trend") and parts:  # no part left (every task did not learn): not decided, as any claim
        outcome = trend_reading(config, claim, parts, decided_sides(config, parts), ends)
    dropped = f"; did not learn (left out): {', '.join(unlearned)}" if unlearned else ""
    return (f"{outcome}: claim on {shape_of(claim)} of each row pair ({family}): {shown}{dropped}"
            f" ({rule(config, tuple(rows[r]['run'] for pair in claim['pairs'] for r in pair))})")


TREND_OUTCOMES = ("holds", "does not hold", "mixed", "not decided")   # a trend's part reads one of these


def trend_reading(config: dict, claim: dict, parts: list[Part], sides: list[str], ends: list[str]) -> str:
    """A trend claim reads as one statement about its chain on each of its parts (MAE-LM Fig. 4:
    the GLUE mean and SQuAD 2.0, listed `apart`), never pair by pair: on a part it holds where
    the chain's ends are decided apart in its favour and no step goes against it, does not hold
    in the opposite case, is mixed where steps were decided both ways, and is otherwise not
    decided (one neighbouring pair decided is no trend). A claim of several parts reads by part
    (`published.by_part`), so it holds on a part only where that part's chain does."""
    chains: dict[str | None, list[tuple[Part, str]]] = {}
    for part, side in zip(parts, sides):
        alone = len(part.tasks) == 1 and stands_apart(config, part.tasks[0], claim)
        chains.setdefault(part.tasks[0] if alone else None, []).append((part, side))
    readings = {chain_name(chain, ends): chain_reading(chain, ends) for chain in chains.values()}
    if len(readings) == 1:
        return next(iter(readings.values()))
    outcomes = {name: reading.split(" (")[0] for name, reading in readings.items()}
    clauses = [f"{outcome} on {', '.join(n for n, o in outcomes.items() if o == outcome)}"
               for outcome in TREND_OUTCOMES if outcome in outcomes.values()]
    mixed = "mixed" in outcomes.values() or {"holds", "does not hold"} <= set(outcomes.values())
    undecided = [n for n, o in outcomes.items() if o == "not decided"]
    why = f" (no trend on {', '.join(undecided)}: its ends are not decided apart)" if undecided else ""
    return ("mixed — " if mixed else "") + "; ".join(clauses) + why


def chain_name(chain: list[tuple[Part, str]], ends: list[str]) -> str:
    """A part of a trend as its reading names it: its task, or the mean of the ends' tasks."""
    part = next((p for p, _ in chain if [p.better, p.than] == ends), chain[0][0])
    return part.tasks[0] if len(part.tasks) == 1 else f"the mean of {len(part.tasks)} tasks"


def chain_reading(chain: list[tuple[Part, str]], ends: list[str]) -> str:
    """One part's chain: its ends and steps, each with its side, read as one trend."""
    sides = [side for _, side in chain]
    end = next((side for part, side in chain if [part.better, part.than] == ends), None)
    if A_BETTER in sides and B_BETTER in sides:
        return "mixed"
    if end == A_BETTER:
        return "holds"
    if end == B_BETTER:
        return "does not hold"
    return "not decided (no trend: the ends are not decided apart)"


def render(config: dict, table: str, root: Path, figures: Path | None = None) -> Rendered:
    """The table's markdown and its verdict on each claim of published.yaml decided by
    `ablations` (a `Verdict` whose text starts with one of `published.OUTCOMES`)."""
    found, rows = read_table(config, table, root), table_rows(config, table)
    body = [row_cells(found, row_id, row, rows) for row_id, row in rows.items()]
    lines = [*found.opening(CARD), *markdown.table(found.header(CARD), body), "", *protocol_lines(rows),
             *control_lines(config, table, root)]
    verdicts = [found.verdict(c["id"], claim_verdict(config, table, c, found.evidence),
                              [rows[r]["run"] for pair in c["pairs"] for r in pair if r in rows])
                for c in claims_decided_by(CARD.name)]
    lines += closing_lines(config, table, root, figures, CARD.claims, verdicts)
    return Rendered("\n".join(lines), verdicts)


def protocol_lines(rows: dict) -> list[str]:
    """Where rows are fine-tuned on tasks of their own (`rows.<row>.tasks`: each paper's
    protocol), which rows, so that a "—" cell reads as not in the row's protocol."""
    own = [f"`{row_id}`: {', '.join(row['tasks'])}" for row_id, row in rows.items() if "tasks" in row]
    if not own:
        return []
    return [f"Each row is fine-tuned on the tasks of its paper's protocol only (— elsewhere): {'; '.join(own)}.", ""]


def row_cells(found: Table, row_id: str, row: dict, rows: dict) -> list[str]:
    """A base run's or an ablation's row: what it is and changes, each task's cell (an
    ablation's with its comparison to its base row), the papers' numbers, its pretraining."""
    config, run = found.config, row["run"]
    base = rows[row["of"]]["run"] if "of" in row else None
    name = f"`{row_id}`" + (f": {row['label']}" if "label" in row else "")
    return [name, f"`{run}`", config["runs"][run]["objective"], change_text(config, row, rows), knobs_text(config, run),
            position_scheme(config, run),
            *(found.task_cell(run, task, after=against_base(found.evidence[task], run, base)
                              if base and (run, task) in found.pairs else "") for task in found.spec["tasks"]),
            published_text(config, row_id, row, rows), learning_cell(config, found.root, run)]
