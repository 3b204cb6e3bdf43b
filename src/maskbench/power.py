"""Power before launch: for every claim a target checks, the smallest difference the profile's
seeds and test sets could decide, beside the paper's gap (`maskbench power TARGET`, or
`maskbench plan TARGET --power`).

A claim is decided on its parts (`report.published.claim_parts`: a mean over tasks, or tasks
each) by the rule of `eval.verdict`: a two-sided Student-t test at 1 - confidence, Holm's rule
across the parts (so the first part is tested at (1 - confidence) / parts: counted here for
every part, a bound on the smallest gap). The difference of two arms on a task has variance

    2 (sd_p^2 / n_p + sd_f^2 / (n_p n_f)) + 2 (1 - rho) sd_e^2 / n

with n_p pretraining seeds, n_f fine-tuning seeds and n test examples per arm, the standard
deviations of `noise.yaml` (measured on the reference builds where they exist, else the
benchmark's published or assumed figures: each entry says which, and where it was read). A
mean over T tasks averages the fine-tuning and example parts (divided by T) but not the
pretraining part: the same encoder is fine-tuned on every task, so its luck is taken as shared
by all of them (fully correlated: the conservative reading). The
smallest decidable gap at 80 % power is (t + z_0.8) x sd of the difference, t on the seeds'
degrees of freedom (Satterthwaite's, as the verdict). With one pretraining seed per arm the
verdict cannot see the pretraining spread at all: such a claim is never decidable here, and
the table says so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml
from scipy import stats

from maskbench import paths
from maskbench.config import pretraining_seeds, task_seeds
from maskbench.config.settings import finetune_settings
from maskbench.eval.verdict import DeclaredSpread, satterthwaite
from maskbench.report import markdown
from maskbench.report.published import (benchmark_of, claim_parts, claim_runs, claims_decided_by, load_published)
from maskbench.resources import task_rows

NOISE = Path(__file__).with_name("noise.yaml")
POWER = 0.8
# the table kinds whose claims compare two runs over tasks (the others decide by their own rules)
KINDS = ("objectives", "look_around", "exlm_grid")


FIGURES = ("pretraining_sd", "finetuning_sd", "example_sd")
STATUSES = ("measured", "published", "assumed")
# what a `published` entry's source must cite: a table or figure, or the page it was read on
CITATION = re.compile(r"\b(Tab\.|Table|Fig\.|Figure) ?[A-Z]?\d|https?://")


@cache
def load_noise() -> dict:
    found = yaml.safe_load(NOISE.read_text())
    check_noise(found)
    return found


def check_noise(found: dict) -> None:
    """Every entry gives the three figures (a number, or a list of published ones to pool), a
    status of STATUSES and a source; a `published` one cites where its numbers were read."""
    for group in ("datasets", "benchmarks"):
        for name, entry in found[group].items():
            where = f"{NOISE.name}: {group}.{name}"
            for figure in FIGURES:
                value = entry.get(figure)
                values = value if isinstance(value, list) else [value]
                if not values or not all(isinstance(v, (int, float)) and v >= 0 for v in values):
                    raise ValueError(f"{where}.{figure} is {value!r}; expected a standard deviation in points "
                                     "(a number >= 0, or a list of published ones)")
            if entry.get("status") not in STATUSES:
                raise ValueError(f"{where}.status is {entry.get('status')!r}; expected one of {', '.join(STATUSES)}")
            if not str(entry.get("source", "")).strip():
                raise ValueError(f"{where} names no source")
            if entry["status"] == "published" and not CITATION.search(entry["source"]):
                raise ValueError(f"{where} is `published` but its source cites no table, figure or URL: "
                                 f"{entry['source']!r}")
            unknown = set(entry.get("assumed", [])) - set(FIGURES)
            if unknown:
                raise ValueError(f"{where}.assumed names {sorted(unknown)}; expected figures of {', '.join(FIGURES)}")
            seeds = entry.get("pretraining_seeds_measured")
            if not pretraining_sd_assumed(entry) and not (isinstance(seeds, int) and seeds >= 2):
                raise ValueError(f"{where}.pretraining_seeds_measured is {seeds!r}; expected the number of pretraining "
                                 "seeds its pretraining_sd was measured on (an integer >= 2: the verdicts' degrees "
                                 "of freedom)")


def pretraining_sd_assumed(entry: dict) -> bool:
    """Whether an entry's `pretraining_sd` is an order of magnitude nobody measured or read."""
    return entry.get("status") == "assumed" or "pretraining_sd" in entry.get("assumed", [])


def pooled(value: float | list[float]) -> float:
    """One standard deviation from several published ones of the same quantity (root mean square)."""
    values = value if isinstance(value, list) else [value]
    return math.sqrt(sum(v * v for v in values) / len(values))


@dataclass(frozen=True)
class Part:
    """One part of a claim at a profile's budget: the smallest gap it could decide (points)."""

    claim: str
    label: str
    pretraining_seeds: int
    finetuning_seeds: str
    test_examples: str
    smallest: float | None   # None: no noise figure for one of its tasks
    paper_gap: float | None
    sources: tuple[str, ...]
    why: str = ""

    @property
    def decidable(self) -> str:
        if self.why:
            return f"not computed ({self.why})"
        if self.pretraining_seeds < 2:
            return "no: one pretraining seed per arm (its verdict cannot see the pretraining spread)"
        if self.paper_gap is None:
            return "no paper gap to compare"
        return "yes" if abs(self.paper_gap) >= self.smallest else "no"


def noise_of(config: dict, task: str) -> dict | None:
    """The task's noise figures: measured on its dataset where they exist, else its benchmark's
    (published or assumed), each figure one number (several published ones pooled)."""
    found = load_noise()
    entry = (found["datasets"].get(config["tasks"][task]["dataset"])
             or found["benchmarks"].get(benchmark_of(config, task) or ""))
    return entry and {**entry, **{figure: pooled(entry[figure]) for figure in FIGURES}}


def declared_spread(config: dict, task: str) -> DeclaredSpread | None:
    """The pretraining spread the verdicts add for `task` (`noise_of`: the power table's figure),
    in the task's score units, with its degrees of freedom: the seeds it was measured on minus 1,
    or 1 for an assumed order of magnitude; None where the task has no entry."""
    entry = noise_of(config, task)
    if entry is None:
        return None
    rmse = config["tasks"][task]["metric"] == "rmse"
    assumed = pretraining_sd_assumed(entry)
    basis = "assumed" if assumed else f"{entry['status']} on {entry['pretraining_seeds_measured']} seeds"
    return DeclaredSpread(entry["pretraining_sd"] / (1 if rmse else 100),
                          1 if assumed else entry["pretraining_seeds_measured"] - 1,
                          f"{task} {entry['pretraining_sd']:g}{'' if rmse else ' points'}, {basis}")


def scored_examples(config: dict, task: str) -> int:
    """Examples a verdict rescores: the test split (dev where the task has no test labels),
    capped at `max_eval_examples`."""
    rows = task_rows(config, task)
    n = rows.get("test") or rows["dev"]
    cap = finetune_settings(config, task)["max_eval_examples"]
    return min(n, cap) if cap else n


def smallest_gap(config: dict, tasks: list[str], pretrained: int, parts: int) -> tuple[float, tuple[str, ...]] | str:
    """(the smallest gap the mean over `tasks` could decide at 80 % power, in points; the
    sources), or why it cannot be said."""
    rho = load_noise()["example_correlation"]
    figures = {t: noise_of(config, t) for t in tasks}
    unknown = [t for t, f in figures.items() if f is None]
    if unknown:
        return f"no noise figure for {', '.join(unknown)} in {NOISE.name}"
    size = len(tasks)
    tuned = {t: len(task_seeds(config, t)) for t in tasks}
    pretraining = 2 * (sum(f["pretraining_sd"] for f in figures.values()) / size) ** 2 / pretrained
    finetuning = {t: 2 * f["finetuning_sd"] ** 2 / (pretrained * tuned[t]) / size ** 2 for t, f in figures.items()}
    example = sum(2 * (1 - rho) * f["example_sd"] ** 2 / scored_examples(config, t) / size ** 2
                  for t, f in figures.items())
    variance = pretraining + sum(finetuning.values()) + example
    # the seeds' parts of the variance and their degrees of freedom, as the verdict counts them
    seed_parts = ([(pretraining + sum(finetuning.values()), 2 * (pretrained - 1))] if pretrained > 1
                  else [(finetuning[t], tuned[t] - 1) for t in tasks])
    df = satterthwaite(variance, [(v, df) for v, df in seed_parts if df > 0])
    alpha = (1 - config["verdicts"]["confidence"]) / parts
    gap = (stats.t.ppf(1 - alpha / 2, df) + stats.norm.ppf(POWER)) * math.sqrt(variance)
    sources = tuple(f"{t}: {f['status']}{assumed_note(f)}, {f['source']}" for t, f in figures.items())
    return float(gap), sources


def assumed_note(entry: dict) -> str:
    return f" (assumed: {', '.join(entry['assumed'])})" if entry.get("assumed") else ""


def paper_gap(config: dict, claim: dict, tasks: list[str]) -> float | None:
    """The paper's gap on the part: the mean over its tasks of `better` minus `than` in the
    claim's source (points), None where a task is not a benchmark the paper measured."""
    source = load_published()["sources"].get(claim.get("measured_in", ""))
    if source is None:
        return None
    rows = {row["objective"]: row["scores"] for row in source["rows"]}
    gaps = []
    for task in tasks:
        metric = config["tasks"][task]["metric"]
        values = [rows.get(side, {}).get(benchmark_of(config, task) or "", {}).get(metric)
                  for side in (claim["better"], claim["than"])]
        if any(v is None for v in values):
            return None
        better, than = (v[0] if isinstance(v, list) else v for v in values)
        gaps.append(better - than)
    return sum(gaps) / len(gaps)


def claim_power(config: dict, table: str, claim: dict) -> list[Part]:
    """The parts of a claim the table checks, each with its smallest decidable gap."""
    better, than = claim_runs(config, table, claim) if "modality" in claim else ([], [])
    run = (better or than or config["tables"][table]["runs"])[0]
    modality = claim.get("modality", config["runs"][run]["modality"])
    tasks = [t for t in config["tables"][table]["tasks"] if config["tasks"][t]["modality"] == modality]
    pretrained = len(pretraining_seeds(config, run))
    parts = claim_parts(config, tasks, claim)
    found = []
    for label, part in parts:
        gap = smallest_gap(config, part, pretrained, len(parts))
        tuned = "/".join(sorted({str(len(task_seeds(config, t))) for t in part}))
        examples = ", ".join(f"{scored_examples(config, t):,}" for t in part)
        common = dict(claim=claim["id"], label=label, pretraining_seeds=pretrained, finetuning_seeds=tuned,
                      test_examples=examples, paper_gap=paper_gap(config, claim, part))
        found.append(Part(**common, smallest=None, sources=(), why=gap) if isinstance(gap, str)
                     else Part(**common, smallest=gap[0], sources=gap[1]))
    return found


def target_tables(config: dict, targets: list[str], others: bool = False) -> list[str]:
    """The tables of `targets` (report files; the `reports` rule: every table); a target that is
    no table's report is an error, or passed over with `others` (a plan's `data`, `pretrained`)."""
    tables = []
    for target in targets:
        if target in ("reports", paths.INDEX):
            tables += list(config["tables"])
            continue
        found = [t for t in config["tables"] if target == paths.REPORT.format(table=t)]
        if not found and not others:
            raise ValueError(f"power: {target!r} is no table's report; expected one of "
                             f"{', '.join(paths.REPORT.format(table=t) for t in config['tables'])} or reports")
        tables += found
    return list(dict.fromkeys(tables))


def power_table(config: dict, targets: list[str]) -> list[Part]:
    kinds = {t: config["tables"][t].get("kind", "objectives") for t in target_tables(config, targets)}
    return [part for table, kind in kinds.items() if kind in KINDS
            for claim in claims_decided_by(kind) if kind != "look_around" or claim.get("measure") == "finetune"
            for part in claim_power(config, table, claim)]


def render(config: dict, targets: list[str]) -> str:
    """The power table as markdown, with the noise figures' sources under it."""
    parts = power_table(config, targets)
    rows = [[p.claim, p.label, str(p.pretraining_seeds), p.finetuning_seeds, p.test_examples,
             "—" if p.smallest is None else f"{p.smallest:.1f}", "—" if p.paper_gap is None else f"{p.paper_gap:+.1f}",
             p.decidable] for p in parts]
    header = ["claim", "part", "pretraining seeds", "fine-tuning seeds", "test examples",
              f"smallest decidable gap (points, {POWER:.0%} power)", "paper's gap", "decidable"]
    sources = sorted({s for p in parts for s in p.sources})
    return "\n".join([f"Power of profile `{config['profile']}` (maskbench.power; noise figures: {NOISE.name}):", "",
                      *markdown.table(header, rows), "", "Noise figures:", *(f"- {s}" for s in sources), ""])
