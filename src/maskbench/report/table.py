"""A kind of table as data (`TableKind`, each kind module's `CARD`), and what every kind's
`render` reads and writes alike (`Table`).

A card says what a reader sees before any number: the kind's name in params.yaml
(`tables.<t>.kind`), its label in the index, its columns in order (`TASKS` standing for one
column per task of the table), the caption above the table (a `str.format` template: `{profile}`
and the marks are filled in for every kind, the rest by the kind's `render`), and the heading
over its claims' verdicts. The kind module's `render` then reads top to bottom: read the table
(`read_table`), one row per run in the kind's layout, each task cell by `Table.task_cell`, then
the verdicts (`Table.verdict`), each beside how far the runs it compares learned.

So a row's task cell, the † mark and the learning context of a verdict are written once for
every kind (docs/adding-a-table-kind.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from maskbench.config import run_label, table_cells
from maskbench.eval.verdict import A_BETTER
from maskbench.power import declared_spread
from maskbench.report.cells import (BELOW_PROBE, DID_NOT_LEARN_MARK, cell, column_header, controlled_cell,
                                    learning_context, read_summaries)
from maskbench.report.evidence import TaskEvidence
from maskbench.report.missing import Missing
from maskbench.report.published import Verdict, control_run

TASKS = "{tasks}"  # in a card's columns: one column per task of the table, headed by `column_header`


@dataclass(frozen=True)
class TableKind:
    """One kind of table (module docstring): `name` as params.yaml's `tables.<t>.kind` spells it
    (and published.yaml's `decided_by` for the claims it decides), `label` as the index shows it,
    `columns` in order, `caption` above the table, `claims` the heading over its verdicts."""

    name: str
    label: str
    columns: tuple[str, ...]
    caption: str
    claims: str


def learned_mark(evidence: TaskEvidence, run: str, none: str | None) -> str:
    """" †" where `run` is not better than the `none` control on the task beyond the noise; ""
    where it is, where it has no other control (none, or it is the control), or where the
    comparison cannot be computed yet (the cell then says what is missing)."""
    if none in (None, run):
        return ""
    learned = evidence.compare_runs(run, none)
    return "" if isinstance(learned, Missing) or learned.outcome == A_BETTER else f" {DID_NOT_LEARN_MARK}"


@dataclass
class Table:
    """A runs-by-tasks table as its `render` reads it from the files under `root`: the (run,
    task) cells that apply (`pairs`), their fine-tuning summaries, each task's evidence (the
    per-example scores the verdicts compare), and the first summary per task (its column
    header's split and aggregate)."""

    config: dict
    name: str
    root: Path
    pairs: list[tuple[str, str]]
    summaries: dict
    evidence: dict[str, TaskEvidence]

    @property
    def spec(self) -> dict:
        return self.config["tables"][self.name]

    def header(self, kind: TableKind) -> list[str]:
        """The card's columns, `TASKS` spelled out as one column header per task."""
        first = {t: next((s for (_, tt), s in self.summaries.items() if tt == t), None) for t in self.spec["tasks"]}
        return [h for c in kind.columns
                for h in ([column_header(self.config, t, first[t]) for t in self.spec["tasks"]] if c == TASKS else [c])]

    def opening(self, kind: TableKind, **fields) -> list[str]:
        """The title and the card's caption, `fields` filling what is the kind's own."""
        caption = kind.caption.format(profile=self.config["profile"], did_not_learn=DID_NOT_LEARN_MARK,
                                      below_probe=BELOW_PROBE, **fields)
        return [f"# {self.name}: {self.spec['title']}", "", caption, ""]

    def run_name(self, run: str) -> str:
        """A run's row name: a control reads as what it is (its objective card's summary)."""
        return run_label(self.config, run)

    def control(self, modality: str) -> str | None:
        """The table's `none` run of `modality`, which † compares with."""
        return control_run(self.config, self.name, modality)

    def task_cell(self, run: str, task: str, probes: dict | None = None, after: str = "") -> str:
        """The (run, task) cell of every kind: the score over seeds (`cells.cell`), then, where
        the run is fine-tuned on the task, the frozen-feature probe beside it (with `probes`:
        table1's) and † where the run did not learn the task (`learned_mark`); `after` last
        (a kind's own: the paper's number, the comparison with a base row)."""
        text = cell(self.summaries.get((run, task)), (run, task) in self.pairs)
        if (run, task) not in self.pairs:
            return text + after
        if probes is not None:
            probe = probes.get((run, task))
            probe_wins = None if probe is None else self.evidence[task].probe_against_run(run)
            metric = self.config["tasks"][task]["metric"]
            text = controlled_cell(text, probe, metric, getattr(probe_wins, "outcome", None))
        none = self.control(self.config["tasks"][task]["modality"])
        return text + learned_mark(self.evidence[task], run, none) + after

    def verdict(self, claim: str, text: str, runs: list[str], part: str | None = None) -> Verdict:
        """A claim's verdict with how far the `runs` it compares learned (`learning_context`)."""
        return Verdict(claim, text, part=part, context=learning_context(self.config, self.root, runs))


def read_table(config: dict, table: str, root: Path) -> Table:
    """What `render` reads first for a runs-by-tasks table (`Table`)."""
    pairs = table_cells(config, table)
    return Table(config, table, root, pairs, read_summaries(config, root, pairs),
                 {t: TaskEvidence(config, t, root, declared_spread(config, t))
                  for t in config["tables"][table]["tasks"]})

