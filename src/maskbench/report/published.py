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
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from maskbench.config import pretraining_runs, pretrains, table_cells
from maskbench.eval.aggregate import reported_metrics
from maskbench.eval.metrics import higher_is_better
from maskbench.eval.verdict import A_BETTER, B_BETTER, FEW_PRETRAINING_SEEDS, UNDECIDED, Comparison, compare_tasks, holm
from maskbench.report import markdown
from maskbench.report.evidence import TaskEvidence
from maskbench.report.missing import Missing

PUBLISHED = Path(__file__).with_name("published.yaml")


@cache
def load_published() -> dict:
    found = yaml.safe_load(PUBLISHED.read_text())
    for claim in found["claims"]:
        check_statistic(claim)
    return found


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
    `text` as the table prints it, `part` naming the row for a claim decided row by row, and
    `context`, how far the runs it compares learned."""

    claim: str
    text: str
    part: str | None = None
    context: str = ""   # how far below the unigram loss the compared runs ended (`cells.learning_context`)

    @property
    def outcome(self) -> str:
        """The verdict in one of OUTCOMES, the words its text starts with."""
        found = next((o for o in OUTCOMES if self.text.startswith(o)), None)
        if found is None:
            raise ValueError(f"verdict of claim {self.claim!r} starts with none of {OUTCOMES}: {self.text[:80]!r}")
        return found

    @property
    def reading(self) -> str:
        """The verdict's words before its evidence: the outcome, by part for a claim of several
        parts (`family_verdict`: "holds on squad_v2; not decided on the mean of 7 tasks")."""
        return re.split(r" \(|:", self.text, maxsplit=1)[0]

    @property
    def parts(self) -> list[str]:
        """Each part's outcome, as its reading names them; a verdict read in one word is one part."""
        clauses = BY_PART.findall(self.reading)
        return [side for side, names in clauses for _ in names.split(", ")] or [self.outcome]

    def line(self) -> str:
        """The verdict as the table lists it under its claims."""
        claim = claim_of(self.claim)
        what = f"{claim['claim']} — {self.part}" if self.part else claim["claim"]
        context = f" Pretraining of the runs compared: {self.context}." if self.context else ""
        return f"- {what} ({claim['source']}). Here: {self.text}.{context}"


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
                 if not pretrains(config, r) and runs[r]["modality"] == modality), None)


def rule(config: dict, runs: tuple[str, ...]) -> str:
    """The noise rule in one line, as every verdict states it, with the sources of noise it
    covers for `runs` (`maskbench.eval.verdict.noise_sources`)."""
    s = config["verdicts"]
    pretrained = max(len(pretraining_runs(config, run)) for run in runs)
    covers = (f"pretraining seeds ({pretrained}), each with its fine-tuning seeds' mean, and test examples"
              if pretrained > 1 else "fine-tuning seeds and test examples")
    seeds = [len(pretraining_runs(config, run)) for run in runs if pretrains(config, run)]
    if seeds and min(seeds) < FEW_PRETRAINING_SEEDS:
        covers += (f", plus the pretraining spread noise.yaml declares for each task of an arm of fewer than "
                   f"{FEW_PRETRAINING_SEEDS} pretraining seeds (one seed, none declared: not decided)")
    return (f"rule: paired bootstrap over {covers} ({s['bootstrap']} resamples), a Student-t "
            f"{100 * s['confidence']:g} % interval for few seeds, decided when it excludes zero; a task where "
            "either run is not better than `none` left out (did not learn)")


def claim_runs(config: dict, table: str, claim: dict) -> tuple[list[str], list[str]]:
    """The table's runs of the claim's `better` and `than` objectives in its modality."""
    runs, spec = config["runs"], config["tables"][table]

    def run_of(objective: str) -> list[str]:
        return [r for r in spec["runs"] if runs[r]["objective"] == objective
                and runs[r]["modality"] == claim["modality"]]

    return run_of(claim["better"]), run_of(claim["than"])


def verdict(config: dict, table: str, claim: dict, evidence: dict[str, TaskEvidence]) -> str:
    """How the claim fares on this table's rows by the noise rule (maskbench.eval.verdict):
    holds, does not hold, mixed, not decided, or why it cannot be said."""
    spec = config["tables"][table]
    better, than = claim_runs(config, table, claim)
    if len(better) != 1 or len(than) != 1:
        return (f"not checked: needs one {claim['modality']} run each of `{claim['better']}` and `{claim['than']}` "
                f"in this table (found {markdown.names(better)} and {markdown.names(than)})")
    better, than = better[0], than[0]
    tasks = [t for t in spec["tasks"] if config["tasks"][t]["modality"] == claim["modality"]]
    source = load_published()["sources"][claim["measured_in"]]
    measured = {b for row in source["rows"] for b in row["scores"]}
    others = [t for t in tasks if benchmark_of(config, t) not in measured]
    cited = source["citation"].split(" (")[0]
    where = ("" if not others else f" (none of the {len(tasks)} tasks is a benchmark of {cited})"
             if len(others) == len(tasks)
             else f" ({len(others)} of the {len(tasks)} tasks {'is' if len(others) == 1 else 'are'} not among the "
             f"benchmarks of {cited})")
    return decide(config, table, better, than, evidence, claim, where)


STATISTICS = ("mean", "each")


def check_statistic(claim: dict) -> None:
    """Every claim says how its paper states it (`statistic`, one of STATISTICS); a `trend`
    claim's pairs form a chain, each pair's second row the next pair's first."""
    if claim.get("statistic") not in STATISTICS:
        raise ValueError(f"{PUBLISHED.name}: claim {claim.get('id')!r} has statistic {claim.get('statistic')!r}; "
                         f"expected one of {', '.join(STATISTICS)}")
    pairs = claim.get("pairs", [])
    if claim.get("trend") and any(a[1] != b[0] for a, b in zip(pairs, pairs[1:])):
        raise ValueError(f"{PUBLISHED.name}: claim {claim['id']!r} is a trend, but its pairs {pairs} do not form a "
                         "chain (each pair's second row the next pair's first)")


def claim_parts(config: dict, tasks: list[str], claim: dict) -> list[tuple[str, list[str]]]:
    """The parts a claim is decided on, as the paper states it (`statistic` in published.yaml):
    `mean`, the mean over its tasks, with the tasks of the benchmarks it lists `apart` (SQuAD
    2.0 beside the GLUE mean) and any lower-is-better task (RMSE: not averaged with scores)
    each a part of its own; `each`, every task a part. (label, tasks) per part."""
    check_statistic(claim)
    if claim["statistic"] == "each":
        return [(t, [t]) for t in tasks]
    alone = [t for t in tasks if stands_apart(config, t, claim)]
    pooled = [t for t in tasks if t not in alone]
    parts = [(f"mean of {len(pooled)} tasks ({', '.join(pooled)})" if len(pooled) > 1 else pooled[0],
              pooled)] if pooled else []
    return parts + [(t, [t]) for t in alone]


def stands_apart(config: dict, task: str, claim: dict) -> bool:
    """Whether a `mean` claim decides `task` as a part of its own (`claim_parts`): a benchmark
    it lists `apart`, or a lower-is-better task."""
    return (benchmark_of(config, task) in claim.get("apart", [])
            or not higher_is_better(config["tasks"][task]["metric"]))


@dataclass(frozen=True)
class Part:
    """One part of a claim between two runs: its label, tasks and comparison (A: `better`)."""

    better: str
    than: str
    label: str
    tasks: list[str]
    comparison: Comparison


def pair_parts(config: dict, table: str, better: str, than: str, evidence: dict[str, TaskEvidence],
               claim: dict) -> tuple[list[Part], list[str]] | Missing:
    """Run `better` against run `than` on the claim's parts (`claim_parts`) of the table's tasks
    of their modality, each part's difference bootstrapped as one statistic
    (`verdict.compare_tasks`: a mean draws the pretraining seeds once for all its tasks), and
    the tasks left out because either run is not better than the modality's `none` control
    there (did not learn); or why it cannot be said."""
    modality, cells = config["runs"][better]["modality"], set(table_cells(config, table))
    tasks = [t for t in config["tables"][table]["tasks"]
             if config["tasks"][t]["modality"] == modality and {(better, t), (than, t)} <= cells]
    if not tasks:
        return Missing(f"not computed: `{better}` vs `{than}`: no {modality} task of this table fine-tunes both")
    none = control_run(config, table, modality)
    kept, unlearned, lacking = [], [], []
    for task in tasks:
        found = evidence[task]
        arms = [Missing(f"`{r}` ({why})") if isinstance(why := found.arm(r), Missing) else why for r in (better, than)]
        learned = [found.compare_runs(r, none) for r in (better, than)] if none else []
        problem = next((c for c in (*arms, *learned) if isinstance(c, Missing)), None)
        if problem:
            lacking.append(f"{task}: {problem}")
        elif any(c.outcome != A_BETTER for c in learned):
            unlearned.append(task)
        else:
            kept.append(task)
    if lacking:
        return Missing(f"not computed: `{better}` vs `{than}` lacks " + "; ".join(lacking))
    s = config["verdicts"]

    def declared(run: str, part: list[str]):   # the recipes compared: each run's pretraining on the part's tasks
        return [evidence[t].pretraining(run)[0] for t in part] if pretrains(config, run) else None

    return [Part(better, than, label, part, compare_tasks(
        [(evidence[t].arm(better), evidence[t].arm(than), higher_is_better(config["tasks"][t]["metric"]))
         for t in part],
        s["confidence"], s["seed"], (declared(better, part), declared(than, part))))
        for label, part in claim_parts(config, kept, claim)], unlearned


# A claim of several parts reads by part: "holds on X, Y; does not hold on Z; not decided on W"
# (a trend's part, its steps decided both ways: "mixed on V", `ablations.trend_reading`)
BY_PART = re.compile(r"(holds|does not hold|mixed|not decided) on ([^;]+)")
PART_SIDES = {A_BETTER: "holds", B_BETTER: "does not hold", UNDECIDED: "not decided"}


def decided_sides(config: dict, parts: list[Part]) -> list[str]:
    """Each part's side under Holm's rule at 1 - confidence across the parts: A_BETTER (its
    `better` run), B_BETTER, or UNDECIDED."""
    decided = holm([p.comparison.p for p in parts], 1 - config["verdicts"]["confidence"])
    return [(A_BETTER if p.comparison.difference > 0 else B_BETTER) if d else UNDECIDED
            for p, d in zip(parts, decided)]


def family_verdict(config: dict, parts: list[Part], named: bool = False) -> tuple[str, str, str]:
    """The parts of one claim decided together by Holm's rule at 1 - confidence: "holds" when a
    part is decided for its `better` run and none for its `than`, "does not hold" in the
    opposite case, "mixed" when both, "not decided" when none; a claim of several parts reads
    by part (`by_part`), so that one part decided of two never reads as the claim; (that
    reading, the family in words, each part's difference, interval, p-value and side;
    `named`: each part prefixed with its two runs)."""
    sides = decided_sides(config, parts)
    outcome = ("mixed" if A_BETTER in sides and B_BETTER in sides else "holds" if A_BETTER in sides
               else "does not hold" if B_BETTER in sides else "not decided")
    if len(parts) > 1:
        outcome = by_part(outcome, [_part_name(p, named) for p in parts], sides)
    held = " at Holm's level"  # its own interval excludes zero, the family's rule does not decide it
    shown = "; ".join(f"{f'`{p.better}` − `{p.than}`, ' if named else ''}{p.label}: "
                      f"{_signed(config, p.tasks, p.comparison)} ({_side(side, p.better, p.than)}"
                      f"{held if side == UNDECIDED and p.comparison.outcome != UNDECIDED else ''})"
                      for p, side in zip(parts, sides))
    family = f"Holm across its {len(parts)} parts" if len(parts) > 1 else "one part"
    return outcome, family, shown or "no task left"


def by_part(outcome: str, names: list[str], sides: list[str]) -> str:
    """A claim of several parts in words, part by part: "holds on squad_v2; not decided on the
    mean of 7 tasks" ("mixed — " first where parts were decided both ways)."""
    clauses = [f"{PART_SIDES[side]} on {', '.join(n for n, s in zip(names, sides) if s == side)}"
               for side in PART_SIDES if side in sides]
    return ("mixed — " if outcome == "mixed" else "") + "; ".join(clauses)


def _part_name(part: Part, named: bool) -> str:
    """A part as its claim's reading names it: its task, or the mean of its tasks; `named`: its
    two runs first."""
    name = part.tasks[0] if len(part.tasks) == 1 else f"the mean of {len(part.tasks)} tasks"
    return f"`{part.better}` − `{part.than}` {name}" if named else name


def decide(config: dict, table: str, better: str, than: str, evidence: dict[str, TaskEvidence], claim: dict,
           where: str = "") -> str:
    """The claim's verdict between run `better` and run `than` (`pair_parts`, `family_verdict`),
    or why it cannot be said."""
    found = pair_parts(config, table, better, than, evidence, claim)
    if isinstance(found, Missing):
        return str(found)
    parts, unlearned = found
    outcome, family, shown = family_verdict(config, parts)
    modality = config["runs"][better]["modality"]
    dropped = f"; did not learn (left out): {', '.join(unlearned)}" if unlearned else ""
    unchecked = ("" if control_run(config, table, modality)
                 else f"; no {modality} `none` run in this table, so learning is not checked")
    return (f"{outcome}{where}: `{better}` − `{than}`, claim on {shape_of(claim)} ({family}): "
            f"{shown}{dropped}{unchecked} ({rule(config, (better, than))})")


def shape_of(claim: dict) -> str:
    return "the mean" if claim["statistic"] == "mean" else "each task"


def _signed(config: dict, tasks: list[str], c: Comparison) -> str:
    """A part's difference and interval, in points of % (RMSE as is), and its p-value."""
    scale, digits = (1, 3) if config["tasks"][tasks[0]]["metric"] == "rmse" else (100, 1)
    if c.why:
        return f"{scale * c.difference:+.{digits}f}, not decided ({c.why})"
    return (f"{scale * c.difference:+.{digits}f} [{scale * c.low:+.{digits}f}, {scale * c.high:+.{digits}f}], "
            f"p {c.p:.2g}")


def _side(side: str, better: str, than: str) -> str:
    return f"`{better}` better" if side == A_BETTER else f"`{than}` better" if side == B_BETTER else "not decided"


def published_grid(source: str, key: str | None, k: int, p: float) -> float | None:
    """A paper's number for the (k, p) cell of a grid in published.yaml `grids` (`key`: a
    benchmark or a measure such as entropy_bits), None where it gives none."""
    cells = load_published()["grids"][source]["cells"].get(key, {}) if key else {}
    return next((value for pp, value in cells.get(k, {}).items() if math.isclose(pp, p, rel_tol=1e-6)), None)


def grid_citation(source: str) -> str:
    return load_published()["grids"][source]["citation"]
