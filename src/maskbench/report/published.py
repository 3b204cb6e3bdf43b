"""The papers' published numbers beside ours, and a verdict for each of their claims.

`published.yaml` holds the numbers as the papers print them. A table column gets a published
number only when its task's dataset *is* the benchmark the paper measured (the dataset's
`benchmark` in params.yaml) and the paper reports the column's headline metric; stand-ins get
none. The column's `also_report` metrics follow in the same order as our cells (SQuAD 2.0
"F1 / EM"), "–" where the paper does not give one. A
claim ("ExLM beats MLM on GLUE") is checked on our own rows: the two runs of the table with
the claim's objectives and modality, task by task, over every task of that modality, by the
noise rule of `maskbench.eval.verdict` (a paired bootstrap over seeds and examples), with the
table's `none` run of that modality as the control each run must beat to count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from maskbench.config import pretraining_runs
from maskbench.eval.aggregate import reported_metrics
from maskbench.eval.verdict import A_BETTER, B_BETTER, claim_outcome, decided_counts, task_outcome
from maskbench.report import markdown
from maskbench.report.evidence import TaskEvidence
from maskbench.report.missing import Missing

PUBLISHED = Path(__file__).with_name("published.yaml")


@cache
def load_published() -> dict:
    return yaml.safe_load(PUBLISHED.read_text())


def claims_decided_by(kind: str) -> list[dict]:
    """The claims of published.yaml that a table of `kind` decides."""
    return [c for c in load_published()["claims"] if c["decided_by"] == kind]


def claim_of(claim_id: str) -> dict:
    return next(c for c in load_published()["claims"] if c["id"] == claim_id)


# What a verdict can say, in the words it starts with: the scorecard reads them from there.
OUTCOMES = ("holds", "does not hold", "mixed", "not decided", "not computed", "not checked")


@dataclass(frozen=True)
class Verdict:
    """A claim of published.yaml (`claim`: its id) as one table decided it: the verdict's
    `text` as the table prints it, and `part` naming the row for a claim decided row by row."""

    claim: str
    text: str
    part: str | None = None

    @property
    def outcome(self) -> str:
        """The verdict in one of OUTCOMES, the words its text starts with."""
        found = next((o for o in OUTCOMES if self.text.startswith(o)), None)
        if found is None:
            raise ValueError(f"verdict of claim {self.claim!r} starts with none of {OUTCOMES}: {self.text[:80]!r}")
        return found

    def line(self) -> str:
        """The verdict as the table lists it under its claims."""
        claim = claim_of(self.claim)
        what = f"{claim['claim']} — {self.part}" if self.part else claim["claim"]
        return f"- {what} ({claim['source']}). Here: {self.text}."


@dataclass(frozen=True)
class Rendered:
    """What a table's renderer returns: its markdown and the verdicts on the claims it decides
    (the report stage writes them beside the table for the scorecard, maskbench.report.index)."""

    markdown: str
    verdicts: list[Verdict]


def benchmark_of(config: dict, task: str) -> str | None:
    return config["datasets"][config["tasks"][task]["dataset"]].get("benchmark")


def published_rows(config: dict, table: str) -> list[tuple[str, dict, list[str]]]:
    """(citation, row, cells) for every published row with a number in one of the table's columns."""
    tasks = config["tables"][table]["tasks"]
    found = []
    for source in load_published()["sources"].values():
        for row in source["rows"]:
            cells = [_published_cell(row["scores"], benchmark_of(config, t), reported_metrics(config["tasks"][t]))
                     for t in tasks]
            if any(c != "—" for c in cells):
                found.append((source["citation"], row, cells))
    return found


def _published_cell(scores: dict, benchmark: str | None, metrics: list[str]) -> str:
    """The paper's numbers for `metrics` (headline first, each over the same splits as the
    headline, e.g. MNLI [matched, mismatched]), or "—" without a headline number."""
    published = scores.get(benchmark, {}) if benchmark else {}
    headline = published.get(metrics[0])
    if headline is None:
        return "—"
    n_splits = len(headline) if isinstance(headline, list) else 1

    def splits(value) -> list:
        if isinstance(value, list):
            return value
        return [value] * n_splits if value is None else [value]

    return " / ".join("–" if v is None else f"{v:.1f}" for m in metrics for v in splits(published.get(m)))


def control_run(config: dict, table: str, modality: str) -> str | None:
    """The table's `none` run of `modality`: the encoder fine-tuned without pretraining."""
    runs = config["runs"]
    return next((r for r in config["tables"][table]["runs"]
                 if runs[r]["objective"] == "none" and runs[r]["modality"] == modality), None)


def rule(config: dict, runs: tuple[str, ...]) -> str:
    """The noise rule in one line, as every verdict states it, with the sources of noise it
    covers for `runs` (`maskbench.eval.verdict.noise_sources`)."""
    s = config["verdicts"]
    pretrained = max(len(pretraining_runs(config, run)) for run in runs)
    covers = (f"pretraining seeds ({pretrained}), fine-tuning seeds within them and test examples" if pretrained > 1
              else "fine-tuning seeds and test examples, conditional on one pretraining run per arm")
    return (f"rule: paired bootstrap over {covers} ({s['bootstrap']} resamples), a task decided "
            f"when the {100 * s['confidence']:g} % interval of the difference excludes zero, a task where either "
            "run is not better than `none` left out (did not learn)")


def verdict(config: dict, table: str, claim: dict, evidence: dict[str, TaskEvidence]) -> str:
    """How the claim fares on this table's rows by the noise rule (maskbench.eval.verdict):
    holds, does not hold, mixed, not decided, or why it cannot be said."""
    runs, spec = config["runs"], config["tables"][table]

    def run_of(objective: str) -> list[str]:
        return [r for r in spec["runs"] if runs[r]["objective"] == objective and runs[r]["modality"] == claim["modality"]]

    better, than = run_of(claim["better"]), run_of(claim["than"])
    if len(better) != 1 or len(than) != 1:
        return (f"not checked: needs one {claim['modality']} run each of `{claim['better']}` and `{claim['than']}` "
                f"in this table (found {markdown.names(better)} and {markdown.names(than)})")
    better, than = better[0], than[0]
    tasks = [t for t in spec["tasks"] if config["tasks"][t]["modality"] == claim["modality"]]
    outcomes = pair_outcomes(config, table, better, than, evidence)
    if isinstance(outcomes, Missing):
        return str(outcomes)
    source = load_published()["sources"][claim["measured_in"]]
    measured = {b for row in source["rows"] for b in row["scores"]}
    others = [t for t in tasks if benchmark_of(config, t) not in measured]
    cited = source["citation"].split(" (")[0]
    where = ("" if not others else f" (none of the {len(tasks)} tasks is a benchmark of {cited})" if len(others) == len(tasks)
             else f" ({len(others)} of the {len(tasks)} tasks {'is' if len(others) == 1 else 'are'} not among the benchmarks of {cited})")
    return pair_verdict(config, table, better, than, outcomes, where)


def pair_outcomes(config: dict, table: str, better: str, than: str,
                  evidence: dict[str, TaskEvidence]) -> dict[str, str] | Missing:
    """Run `better` against run `than` on every task of the table of their modality: each
    task's `task_outcome` (the runs that did not beat the modality's `none` control leave it),
    or why it cannot be said."""
    modality = config["runs"][better]["modality"]
    tasks = [t for t in config["tables"][table]["tasks"] if config["tasks"][t]["modality"] == modality]
    if not tasks:
        return Missing(f"not computed: `{better}` vs `{than}`: no {modality} task in this table")
    none = control_run(config, table, modality)
    outcomes, lacking = {}, []
    for task in tasks:
        found = evidence[task]
        pair = found.compare(better, than)
        learned = [found.compare(r, none) for r in (better, than)] if none else [None, None]
        problem = next((c for c in (pair, *learned) if isinstance(c, Missing)), None)
        if problem:
            lacking.append(f"{task}: {problem}")
        else:
            outcomes[task] = task_outcome(pair, *learned)
    if lacking:
        return Missing(f"not computed: `{better}` vs `{than}` lacks " + "; ".join(lacking))
    return outcomes


def pair_verdict(config: dict, table: str, better: str, than: str, outcomes: dict[str, str], where: str = "") -> str:
    """"holds: `a` better on n (tasks), `b` better on m; decided on … (rule)" from `pair_outcomes`."""
    modality = config["runs"][better]["modality"]

    def named(run: str, side: str) -> str:
        won = [t for t, o in outcomes.items() if o == side]
        return f"`{run}` better on {len(won)}" + (f" ({', '.join(won)})" if won else "")

    none = control_run(config, table, modality)
    unchecked = "" if none else f"; no {modality} `none` run in this table, so learning is not checked"
    return (f"{claim_outcome(list(outcomes.values()))}{where}: {named(better, A_BETTER)}, {named(than, B_BETTER)}; "
            f"{decided_counts(list(outcomes.values()))}{unchecked} ({rule(config, (better, than))})")


def published_grid(source: str, key: str | None, k: int, p: float) -> float | None:
    """A paper's number for the (k, p) cell of a grid in published.yaml `grids` (`key`: a
    benchmark or a measure such as entropy_bits), None where it gives none."""
    cells = load_published()["grids"][source]["cells"].get(key, {}) if key else {}
    return next((value for pp, value in cells.get(k, {}).items() if math.isclose(pp, p, rel_tol=1e-6)), None)


def grid_citation(source: str) -> str:
    return load_published()["grids"][source]["citation"]
