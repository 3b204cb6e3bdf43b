"""Power before launch: for every claim a target checks, the smallest difference the profile's
seeds and test sets could decide by the verdicts' own rule, beside the paper's gap
(`maskbench power TARGET`, or `maskbench plan TARGET`, after the bill).

The rule (`eval.verdict`) decides a part of a claim (`report.published.claim_parts`: a mean over
tasks, or a task) when Student's t interval on the bootstrap's standard error excludes zero,
with Satterthwaite's degrees of freedom, Holm's rule across the claim's parts. Its variance of
the difference of two arms on a part sums three parts, per arm:

    pretraining  sd_p^2 / n_p      fine-tuning  sd_f^2 / (n_p n_f)      examples  (1 - rho) sd_e^2 / n

(a mean over T tasks averages the fine-tuning and example parts over its tasks, divided by T,
but not the pretraining part: the same encoder is fine-tuned on every task, its luck taken as
shared by all of them, the conservative reading). An arm of n_p >= 3 pretraining seeds measures
its seed parts, with n_p - 1 degrees of freedom; an arm of fewer takes the pretraining part from
the figure `noise.yaml` declares, with the degrees of freedom of the seeds that figure rests on
(`declared_pretraining`; both arms' shares of it are one estimate, so one part), and measures
its fine-tuning part from its fine-tuning seeds. The examples' part counts as known (hundreds of
examples) in the rule's quantile, t on the Satterthwaite degrees of freedom of all parts; the
statistic itself scatters as a non-central t on the seed parts' own degrees of freedom (the
simulation of 2026-12-01: the rule's power at 3 pretraining seeds is a t on ~4 df's, not the ~9
of its quantile). The smallest gap decided at 80 % power is the non-centrality that puts 80 % of
that distribution beyond the t quantile at (1 - confidence) / parts (Holm's first step: a bound
for every part), times the difference's standard deviation (`smallest_gap`).
tests/test_power_simulated.py checks it against the rule itself: `simulate` builds synthetic
resampled scores with these spreads and decides them with `eval.verdict.compare_tasks` and
`holm`, which is also how the table's false-decision rate of a claim between equal recipes is
measured.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import yaml
from scipy import optimize, stats

from maskbench import paths
from maskbench.config import pretraining_seeds, table_cells, table_rows, task_seeds
from maskbench.config.settings import corpus_datasets, finetune_settings
from maskbench.eval.verdict import (FEW_PRETRAINING_SEEDS, DeclaredSpread, compare_tasks, figure_parts, holm,
                                    satterthwaite)
from maskbench.report.published import (benchmark_of, claim_parts, claim_runs, claims_decided_by, load_published)
from maskbench.resources import task_rows

NOISE = Path(__file__).with_name("noise.yaml")
POWER = 0.8
NOMINAL = 0.05           # the false-decision rate a decidable part may have (the rule's level at confidence 95 %)
MOST_SEEDS = 64          # the most pretraining seeds per arm a "needs N seeds" search tries
SIMULATED_BUILDS = 400   # builds of two equal recipes behind a printed false-decision rate
SIMULATED_RESAMPLES = 200
WIDTH = 120              # terminal columns
LABEL = 60               # a part's label beside its numbers (a longer one on a line of its own)
# the table kinds whose claims compare two runs' fine-tuned scores over tasks (an ablation table's
# claims name their row pairs; the others decide by rules of their own: `claim_power`)
FINE_TUNED = ("objectives", "look_around", "exlm_grid")


FIGURES = ("pretraining_sd", "finetuning_sd", "example_sd")
# The analysis measures a claim compares between two recipes (noise.yaml `measures`), with their unit
MEASURES = {"entropy_bits": "bits", "generation_nll": "nats"}
STATUSES = ("measured", "published", "assumed")
# what a `published` entry's source must cite: a table or figure, or the page it was read on
CITATION = re.compile(r"\b(Tab\.|Table|Fig\.|Figure) ?[A-Z]?\d|https?://")


@cache
def load_noise() -> dict:
    found = yaml.safe_load(NOISE.read_text())
    check_noise(found)
    return found


def check_noise(found: dict) -> None:
    """Every entry gives the three figures (a number, or a list to pool: several arms' or papers'), a
    status of STATUSES and a source; a `published` one cites where its numbers were read; a
    `pretraining_seeds` (the seeds its pretraining_sd rests on) is a count of at least 2."""
    basis = found.get("assumed_pretraining_seeds")
    if not isinstance(basis, int) or basis < 2:
        raise ValueError(f"{NOISE.name}: assumed_pretraining_seeds is {basis!r}; expected a count of at least 2")
    for group in ("datasets", "benchmarks"):
        for name, entry in found[group].items():
            where = f"{NOISE.name}: {group}.{name}"
            for figure in FIGURES:
                value = entry.get(figure)
                values = value if isinstance(value, list) else [value]
                if not values or not all(isinstance(v, (int, float)) and v >= 0 for v in values):
                    raise ValueError(f"{where}.{figure} is {value!r}; expected a standard deviation in points "
                                     "(a number >= 0, or a list of them to pool)")
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
            seeds = entry.get("pretraining_seeds", basis if pretraining_sd_assumed(entry) else None)
            if not isinstance(seeds, int) or seeds < 2:
                raise ValueError(f"{where}.pretraining_seeds is {seeds!r}; expected the count (>= 2) of pretraining "
                                 "seeds its measured or published pretraining_sd rests on (the verdicts' degrees "
                                 "of freedom)")

    for measure, corpora in found.get("measures", {}).items():
        if measure not in MEASURES:
            raise ValueError(f"{NOISE.name}: measures.{measure} is not a measure a claim compares; expected one of "
                             f"{', '.join(MEASURES)}")
        for corpus, entry in corpora.items():
            where = f"{NOISE.name}: measures.{measure}.{corpus}"
            if not isinstance(entry.get("pretraining_sd"), (int, float)) or entry["pretraining_sd"] < 0:
                raise ValueError(f"{where}.pretraining_sd is {entry.get('pretraining_sd')!r}; expected a standard "
                                 f"deviation in {MEASURES[measure]} (a number >= 0)")
            for count, least in (("pretraining_seeds", 2), ("runs", 1)):
                if not isinstance(entry.get(count), int) or entry[count] < least:
                    raise ValueError(f"{where}.{count} is {entry.get(count)!r}; expected a count >= {least} (the "
                                     "pooled spread's degrees of freedom are runs x (pretraining_seeds - 1))")
            if entry.get("status") != "measured" or not str(entry.get("source", "")).strip():
                raise ValueError(f"{where}: expected status `measured` and a source naming the runs it was "
                                 "measured on (a measure's spread is this project's own, at its scale)")
    check_reruns(found)


def check_reruns(found: dict) -> None:
    """A published spread of whole reruns (pretraining and fine-tuning afresh) bounds the
    benchmarks' declared figures from below: figures that promise a mean less scatter than a
    study measured over its reruns would let the verdicts decide on luck. Each `reruns` entry
    names its benchmarks, the spread and the reruns it was measured over, and where it was read;
    the figures it covers must give one rerun of their mean at least the lower 95 % limit of
    that spread."""
    for name, entry in found.get("reruns", {}).items():
        where = f"{NOISE.name}: reruns.{name}"
        if not isinstance(entry.get("sd"), (int, float)) or entry["sd"] <= 0:
            raise ValueError(f"{where}.sd is {entry.get('sd')!r}; expected the published standard deviation (> 0)")
        if not isinstance(entry.get("reruns"), int) or entry["reruns"] < 2:
            raise ValueError(f"{where}.reruns is {entry.get('reruns')!r}; expected the count (>= 2) of reruns "
                             "it was measured over")
        unknown = [b for b in entry.get("benchmarks") or [None] if b not in found["benchmarks"]]
        if unknown:
            raise ValueError(f"{where}.benchmarks names {unknown}; expected benchmarks of {NOISE.name}'s "
                             f"`benchmarks`: {', '.join(found['benchmarks'])}")
        if entry.get("status") != "published" or not CITATION.search(str(entry.get("source", ""))):
            raise ValueError(f"{where}: expected status `published` and a source citing the table it was read in")
        declared = rerun_spread(found["benchmarks"], entry["benchmarks"])
        floor = limit(entry["sd"], entry["reruns"], "lower")
        if declared < floor:
            raise ValueError(f"{where}: the declared figures of {', '.join(entry['benchmarks'])} give one rerun of "
                             f"their mean a spread of {declared:.3f} points, below {floor:.3f}, the lower 95 % "
                             f"limit of the published {entry['sd']:g} over {entry['reruns']} reruns; raise their "
                             "pretraining_sd or finetuning_sd")


def rerun_spread(benchmarks: dict, names: list[str]) -> float:
    """The spread the declared figures give one rerun of the mean over `names` on fixed test
    examples: the pretraining part shared by the tasks (as `rule_shape` takes it), the
    fine-tuning parts independent."""
    entries = [benchmarks[n] for n in names]
    shared = sum(pooled(e["pretraining_sd"]) for e in entries) / len(entries)
    own = sum(pooled(e["finetuning_sd"]) ** 2 for e in entries) / len(entries) ** 2
    return math.sqrt(shared ** 2 + own)


def rerun_notes(config: dict, tasks: list[str]) -> tuple[str, ...]:
    """What a published whole-rerun spread says of the declared figures behind `tasks`: each
    `reruns` entry whose benchmarks hold every benchmark whose figures the tasks take."""
    found = load_noise()
    taken = {benchmark_of(config, t) for t in tasks if config["tasks"][t]["dataset"] not in found["datasets"]}
    notes = []
    for name, entry in found.get("reruns", {}).items():
        if taken and taken <= set(entry["benchmarks"]):
            declared = rerun_spread(found["benchmarks"], entry["benchmarks"])
            low, high = (limit(entry["sd"], entry["reruns"], side) for side in ("lower", "upper"))
            notes.append(f"{name} ({', '.join(entry['benchmarks'])}), whole reruns: noise.yaml's figures give one "
                         f"rerun of its mean a spread of {declared:.2f}; published {entry['sd']:g} over "
                         f"{entry['reruns']} reruns (95 % limits {low:.2f}-{high:.2f}), {entry['source']}")
    return tuple(notes)


def limit(sd: float, reruns: int, side: str, level: float = 0.95) -> float:
    """A `level` confidence limit of a standard deviation measured over `reruns` runs (chi-square)."""
    df, tail = reruns - 1, (1 - level) / 2
    return sd * math.sqrt(df / stats.chi2.ppf(1 - tail if side == "lower" else tail, df))


def pooled(value: float | list[float]) -> float:
    """One standard deviation from several of the same quantity (several arms of one build, or papers;
    root mean square)."""
    values = value if isinstance(value, list) else [value]
    return math.sqrt(sum(v * v for v in values) / len(values))


def noise_of(config: dict, task: str) -> dict | None:
    """The task's noise figures: measured on its dataset where they exist, else its benchmark's
    (published or assumed), each figure one number (several published ones pooled)."""
    found = load_noise()
    entry = (found["datasets"].get(config["tasks"][task]["dataset"])
             or found["benchmarks"].get(benchmark_of(config, task) or ""))
    return entry and {**entry, **{figure: pooled(entry[figure]) for figure in FIGURES}}


def declared_pretraining(config: dict, task: str) -> tuple[float, int] | None:
    """The spread between pretraining seeds `noise.yaml` declares for the task (points) and the
    number of pretraining seeds it rests on: its own `pretraining_seeds`, or, for a figure
    assumed rather than measured or read, `assumed_pretraining_seeds`. What the rule adds to an
    arm of fewer than FEW_PRETRAINING_SEEDS pretraining seeds (with that count less one degrees of
    freedom); None where the task has no entry."""
    figures = noise_of(config, task)
    if figures is None:
        return None
    basis = (load_noise()["assumed_pretraining_seeds"] if pretraining_sd_assumed(figures)
             else figures["pretraining_seeds"])
    return figures["pretraining_sd"], basis


def declared_spread(config: dict, task: str) -> DeclaredSpread | None:
    """The pretraining spread the verdicts add for `task` (`declared_pretraining`: the power
    table's figure), in the task's score units, with its degrees of freedom (the seeds it rests
    on, minus 1); None where the task has no entry."""
    found = declared_pretraining(config, task)
    if found is None:
        return None
    sd, seeds = found
    entry = noise_of(config, task)
    rmse = config["tasks"][task]["metric"] == "rmse"
    basis = (f"assumed, weighed as {seeds} seeds" if pretraining_sd_assumed(entry)
             else f"{entry['status']} on {seeds} seeds")
    return DeclaredSpread(sd / (1 if rmse else 100), seeds - 1, f"{task} {sd:.3g}{'' if rmse else ' points'}, {basis}")


def declared_measure_spread(config: dict, measure: str, run: str) -> DeclaredSpread | None:
    """The spread between pretraining seeds of one recipe that noise.yaml declares for an analysis
    `measure` (MEASURES) on the corpus `run` pretrains on, in the measure's unit, with the degrees
    of freedom of the pooled figure (runs x (pretraining_seeds - 1)); on a corpus of several
    datasets, the widest of theirs; None where a dataset of the corpus has none. A claim on the
    measure adds it to each side of a difference, each side being one pretraining run (the
    analyses measure seed 0)."""
    declared = load_noise().get("measures", {}).get(measure, {})
    found = [(name, declared.get(name)) for name in corpus_datasets(config, config["runs"][run]["modality"])]
    if any(entry is None for _, entry in found):
        return None
    name, entry = max(found, key=lambda item: item[1]["pretraining_sd"])
    seeds, runs = entry["pretraining_seeds"], entry["runs"]
    return DeclaredSpread(entry["pretraining_sd"], runs * (seeds - 1),
                          f"{measure} on {name} {entry['pretraining_sd']:g} {MEASURES[measure]}, measured on "
                          f"{seeds} seeds of {runs} runs")


def pretraining_sd_assumed(entry: dict) -> bool:
    """Whether an entry's `pretraining_sd` is an order of magnitude nobody measured or read."""
    return entry.get("status") == "assumed" or "pretraining_sd" in entry.get("assumed", [])


def scored_examples(config: dict, task: str) -> int:
    """Examples a verdict rescores: the test split (dev where the task has no test labels),
    capped at `max_eval_examples`."""
    rows = task_rows(config, task)
    n = rows.get("test") or rows["dev"]
    cap = finetune_settings(config, task)["max_eval_examples"]
    return min(n, cap) if cap else n


@dataclass(frozen=True)
class Shape:
    """A part's difference as the rule sees it at some seeds: its variance (points^2), the
    degrees of freedom of the rule's t quantile, and those of the statistic's own spread."""

    variance: float
    df: float          # the rule's: its t quantile's
    seed_df: float     # the seed parts' own (Satterthwaite's over them alone): the statistic's spread


def rule_shape(config: dict, tasks: list[str], pretrained: tuple[int, int], tuned: dict[str, int]) -> Shape:
    """The variance and degrees of freedom the rule gives the difference of two arms (their
    pretraining seeds `pretrained`, fine-tuning seeds `tuned` per task) on the mean over `tasks`
    (see the module's docstring)."""
    rho = load_noise()["example_correlation"]
    figures = {t: noise_of(config, t) for t in tasks}
    size = len(tasks)
    shared_sd = sum(f["pretraining_sd"] for f in figures.values()) / size
    examples = sum((1 - rho) * f["example_sd"] ** 2 / scored_examples(config, t)
                   for t, f in figures.items()) / size ** 2
    variance, seed_parts, declared = 2 * examples, [], 0.0
    for n_p in pretrained:
        finetuning = {t: f["finetuning_sd"] ** 2 / (n_p * tuned[t]) / size ** 2 for t, f in figures.items()}
        if n_p >= FEW_PRETRAINING_SEEDS:  # pretraining seeds drawn: their spread holds the fine-tuning seeds'
            part = shared_sd ** 2 / n_p + sum(finetuning.values())
            variance += part
            seed_parts.append((part, n_p - 1))
            continue
        declared += shared_sd ** 2 / n_p
        variance += shared_sd ** 2 / n_p + sum(finetuning.values())
        seed_parts += [(finetuning[t], tuned[t] - 1) for t in tasks if tuned[t] > 1]
    if declared:  # both arms' shares of one declared figure: one estimate, on its degrees of freedom
        seed_parts.append((declared, min(declared_pretraining(config, t)[1] for t in tasks) - 1))
    seeds = sum(v for v, df in seed_parts if df > 0)
    return Shape(variance, satterthwaite(variance, seed_parts), satterthwaite(seeds, seed_parts))


def critical_t(shape: Shape, alpha: float) -> float:
    quantile = stats.t.ppf(1 - alpha / 2, shape.df) if math.isfinite(shape.df) else stats.norm.ppf(1 - alpha / 2)
    return float(quantile)


def power_at(gap: float, shape: Shape, alpha: float) -> float:
    """The chance the rule decides a true difference `gap` (points) at two-sided level `alpha`:
    the non-central t's mass beyond the quantile, both tails."""
    t, delta = critical_t(shape, alpha), abs(gap) / math.sqrt(shape.variance)
    if not math.isfinite(shape.seed_df):
        return float(stats.norm.sf(t - delta) + stats.norm.cdf(-t - delta))
    wrong_sign = stats.nct.cdf(-t, shape.seed_df, delta)  # NaN far in the tail (scipy): nothing there
    return float(stats.nct.sf(t, shape.seed_df, delta) + (0.0 if math.isnan(wrong_sign) else wrong_sign))


def smallest_gap(shape: Shape, alpha: float) -> float:
    """The smallest difference (points) decided with probability POWER at level `alpha`."""
    high = math.sqrt(shape.variance) * (critical_t(shape, alpha) + 1)
    while power_at(high, shape, alpha) < POWER:  # a t on few degrees of freedom: heavy tails
        high *= 2
    return float(optimize.brentq(lambda gap: power_at(gap, shape, alpha) - POWER, 0.0, high, xtol=1e-6))


# --- the rule itself, on synthetic builds --------------------------------------------------------

def synthetic_arm(rng: np.random.Generator, figures: list[dict], examples: list[int], rho: float, pretrained: int,
                  tuned: list[int], shift: float, luck: np.ndarray, shared: list[np.ndarray]) -> list[np.ndarray]:
    """One arm's resampled scores per task, (pretraining, fine-tuning seeds, 1 + resamples), as
    `eval.verdict.resampled_scores` makes them, drawn from the noise model: the arm's
    pretraining seeds' `luck` (one standard normal per seed, shared by every task) times each
    task's pretraining_sd, a fine-tuning shift per seed and task, and the examples: the score
    on all of them (column 0) and on each bootstrap draw, the part `shared` by both arms
    (correlation rho) and the arm's own, common to its seeds."""
    arms = []
    for f, n, n_f, common in zip(figures, examples, tuned, shared):
        own_sd = math.sqrt((1 - rho) / n) * f["example_sd"]
        own = rng.normal(0, own_sd, common.shape[0])
        own[1:] += own[0]
        tuned_luck = f["finetuning_sd"] * rng.standard_normal((pretrained, n_f))
        arms.append((shift + f["pretraining_sd"] * luck[:, None] + tuned_luck)[..., None] + (common + own)[None, None])
    return arms


def declared_in_points(config: dict, part: list[str]) -> list[DeclaredSpread | None]:
    """The pretraining spread the rule adds for each task of `part`, in points (the synthetic
    builds' unit; `declared_spread` gives the tasks' score units)."""
    found = [declared_pretraining(config, t) for t in part]
    return [None if f is None else DeclaredSpread(f[0], f[1] - 1, t) for f, t in zip(found, part)]


def simulate(config: dict, parts: list[list[str]], pretrained: tuple[int, int], gaps: list[float], builds: int,
             resamples: int = SIMULATED_RESAMPLES, seed: int = 0) -> tuple[list[float], float]:
    """How often the rule decides each part, and any part (Holm over `parts`, at
    verdicts.confidence), when the two arms differ by `gaps` (points, per part; 0: equal
    recipes) with the spreads of `noise.yaml`: `builds` synthetic builds through
    `eval.verdict.compare_tasks` and `holm`. The arms' pretraining luck is shared by every task
    of every part (one encoder per seed)."""
    rng = np.random.default_rng(seed)
    rho, confidence = load_noise()["example_correlation"], config["verdicts"]["confidence"]
    layout = [([noise_of(config, t) for t in part], [scored_examples(config, t) for t in part],
               [len(task_seeds(config, t)) for t in part], declared_in_points(config, part)) for part in parts]
    decided, anything = np.zeros(len(parts)), 0
    for build in range(builds):
        luck = [rng.standard_normal(n_p) for n_p in pretrained]
        pvalues = []
        for (figures, examples, tuned, declared), gap in zip(layout, gaps):
            shared = []
            for f, n in zip(figures, examples):
                common = rng.normal(0, math.sqrt(rho / n) * f["example_sd"], resamples + 1)
                common[1:] += common[0]
                shared.append(common)
            a, b = (synthetic_arm(rng, figures, examples, rho, n_p, tuned, shift, arm_luck, shared)
                    for n_p, shift, arm_luck in zip(pretrained, (gap, 0.0), luck))
            pvalues.append(compare_tasks([(x, y, True) for x, y in zip(a, b)], confidence, seed=build,
                                         declared=(declared, declared)).p)
        rejected = holm(pvalues, 1 - confidence)
        decided += rejected
        anything += any(rejected)
    return list(decided / builds), anything / builds


# --- the power table -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Part:
    """One part of a claim at a profile's budget: the smallest gap it could decide (points), the
    power at the paper's gap, the claim's false-decision rate between equal recipes, and the
    pretraining seeds per arm that would decide it."""

    claim: str
    label: str
    pretraining_seeds: int
    finetuning_seeds: str
    smallest: float | None   # None: no noise figure for one of its tasks
    paper_gap: float | None
    power: float | None
    false_rate: float | None  # how often the rule decides this part between equal recipes, simulated
    claim_false_rate: float | None  # how often it decides any part of the claim
    needs: int | None         # pretraining seeds per arm deciding the paper's gap; None: none up to MOST_SEEDS
    runs: tuple[str, ...]
    sources: tuple[str, ...]
    why: str = ""
    measure: str = ""         # an analysis measure's claim (noise.yaml `measures`): its gap in the measure's unit

    @property
    def decided(self) -> bool:
        """Decidable at POWER at the paper's gap, its false-decision rate (where simulated) at
        most the nominal 5 %."""
        return (not self.why and self.power is not None and self.power >= POWER
                and (self.false_rate is None or self.false_rate <= NOMINAL))

    @property
    def decidable(self) -> str:
        return "—" if self.why or self.paper_gap is None else "yes" if self.decided else "no"


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


def assumed_note(entry: dict) -> str:
    return f" (assumed: {', '.join(entry['assumed'])})" if entry.get("assumed") else ""


def seeds_needed(config: dict, tasks: list[str], tuned: dict[str, int], gap: float | None, alpha: float) -> int | None:
    """The fewest pretraining seeds per arm (FEW_PRETRAINING_SEEDS .. MOST_SEEDS) at which `gap` is
    decided at POWER; None if none is."""
    if gap is None:
        return None
    return next((n for n in range(FEW_PRETRAINING_SEEDS, MOST_SEEDS + 1)
                 if power_at(gap, rule_shape(config, tasks, (n, n), tuned), alpha) >= POWER), None)


def claim_power(config: dict, table: str, claim: dict, builds: int = SIMULATED_BUILDS) -> list[Part]:
    """The parts of a claim the table checks, priced by the rule that decides it: fine-tuned
    scores of two runs over tasks (`fine_tuned_power`), of a table's row pairs (`ablation_power`),
    or an analysis measure of one pretraining run per side (`measure_power`); a claim decided by
    a rule of its own (a grid's diagonal, a rank margin) is one part saying so, never left out."""
    if "noise_measure" in claim:
        return measure_power(config, table, claim)
    if "pairs" in claim:
        return ablation_power(config, table, claim, builds)
    if claim["decided_by"] in FINE_TUNED:
        better, than = claim_runs(config, table, claim) if "modality" in claim else ([], [])
        runs = tuple(r[0] for r in (better, than) if r) or tuple(config["tables"][table]["runs"][:1])
        if "modality" in claim and len(runs) < 2:
            return []
        return fine_tuned_power(config, table, claim, [runs], claim.get("modality"), builds)
    return [Part(claim=claim["id"], label="(its own rule)", pretraining_seeds=0, finetuning_seeds="—", smallest=None,
                 paper_gap=None, power=None, false_rate=None, claim_false_rate=None, needs=None, runs=(),
                 sources=(), why=f"decided by the {claim['decided_by']} table's own rule, not priced here")]


def fine_tuned_power(config: dict, table: str, claim: dict, pairs: list[tuple[str, ...]], modality: str | None,
                     builds: int, gap_of=None) -> list[Part]:
    """Each pair of runs (`better`, `than`) on the claim's parts (`claim_parts`) of the table's
    tasks of its modality that fine-tune both, Holm over every part of every pair; the claim's
    false-decision rate between equal recipes simulated over all of them (`builds`; 0: not
    simulated) at the fewest pretraining seeds of each side. `gap_of(pair, tasks)`: the paper's
    gap on a part (default: the claim's source, `paper_gap`)."""
    cells = set(table_cells(config, table)) if "pairs" in claim else None
    laid = []
    for runs in pairs:
        kind = modality or config["runs"][runs[0]]["modality"]
        tasks = [t for t in config["tables"][table]["tasks"] if config["tasks"][t]["modality"] == kind
                 and (cells is None or all((r, t) in cells for r in runs))]
        laid += [(runs, label, part) for label, part in claim_parts(config, tasks, claim)]
    if not laid:
        return []
    seeds = [[len(pretraining_seeds(config, r)) for r in runs] for runs, _, _ in laid]
    pretrained = (min(s[0] for s in seeds), min(s[-1] for s in seeds))
    alpha = (1 - config["verdicts"]["confidence"]) / len(laid)
    unknown = sorted({t for _, _, part in laid for t in part if noise_of(config, t) is None})
    rates, claim_rate = (simulate(config, [part for _, _, part in laid], pretrained, [0.0] * len(laid), builds)
                         if builds and not unknown else ([None] * len(laid), None))
    found = []
    for (runs, label, part), arms, false_rate in zip(laid, seeds, rates):
        tuned = {t: len(task_seeds(config, t)) for t in part}
        gap = paper_gap(config, claim, part) if gap_of is None else gap_of(runs, part)
        common = dict(claim=claim["id"], label=label if len(pairs) == 1 else f"{' vs '.join(runs)}: {label}",
                      pretraining_seeds=min(arms), finetuning_seeds="/".join(sorted({str(n) for n in tuned.values()})),
                      paper_gap=gap, runs=runs, false_rate=false_rate, claim_false_rate=claim_rate)
        missing = [t for t in part if noise_of(config, t) is None]
        if missing:
            found.append(Part(**common, smallest=None, power=None, needs=None, sources=(),
                              why=f"no noise figure for {', '.join(missing)} in {NOISE.name}"))
            continue
        shape = rule_shape(config, part, (arms[0], arms[-1]), tuned)
        sources = tuple(f"{t}: {f['status']}{assumed_note(f)}, {f['source']}"
                        for t in part if (f := noise_of(config, t))) + rerun_notes(config, part)
        found.append(Part(**common, smallest=smallest_gap(shape, alpha), sources=sources,
                          power=None if gap is None else power_at(gap, shape, alpha),
                          needs=seeds_needed(config, part, tuned, gap, alpha)))
    return found


def ablation_power(config: dict, table: str, claim: dict, builds: int) -> list[Part]:
    """A claim on row pairs of an ablation table (`report.ablations.claim_verdict`: a trend's
    two ends too), every part of every pair under one Holm; the paper's gap from its numbers for
    the rows (published.yaml `ablations`): the part's tasks where the paper gives each, else its
    average for a mean; none where the table lacks a row (the claim is not checked)."""
    rows = table_rows(config, table)
    if any(r not in rows for pair in claim["pairs"] for r in pair):
        return []
    named = ([[claim["pairs"][0][0], claim["pairs"][-1][1]]] if claim.get("trend") else []) + claim["pairs"]
    paper = {row: scores for source in load_published()["ablations"].values()
             for row, scores in source["rows"].items()}
    row_pairs = {tuple(rows[r]["run"] for r in pair): pair for pair in named}  # two rows may share a run

    def gap_of(runs: tuple[str, ...], tasks: list[str]) -> float | None:
        scores = [paper.get(row, {}) for row in row_pairs[runs]]
        keys = [benchmark_of(config, t) for t in tasks]
        if all(k in s for k in keys for s in scores):
            return sum(scores[0][k] - scores[1][k] for k in keys) / len(keys)
        return scores[0]["avg"] - scores[1]["avg"] if len(tasks) > 1 and all("avg" in s for s in scores) else None

    return fine_tuned_power(config, table, claim, list(row_pairs), None, builds, gap_of)


def measure_power(config: dict, table: str, claim: dict) -> list[Part]:
    """A claim on an analysis measure (noise.yaml `measures`: `claim["noise_measure"]`), each side
    one pretraining run (the analyses measure seed 0), decided at the full confidence
    (`eval.verdict.compare_measured`): its smallest gap at 80 % power from the declared spreads
    alone, both sides' shares of one figure on that figure's degrees of freedom. The tokens' or
    blocks' own noise is known only once built, so the printed gap is a lower bound; more
    pretraining seeds do not narrow it. Parts: the look-around claim's `better` run against each
    run of `than`; a grid's pairs of neighbouring cells, as one part."""
    runs = config["tables"][table]["runs"]
    if claim["decided_by"] == "look_around":
        better = [r for r in runs if config["runs"][r]["objective"] == claim["better"]]
        than = [r for r in runs if config["runs"][r]["objective"] == claim["than"]]
        pairs = [(better[0], r) for r in than] if len(better) == 1 else []
    else:  # a grid of one modality: any run names its corpus
        pairs = [(runs[0], runs[0])] if runs else []
    alpha = 1 - config["verdicts"]["confidence"]
    unit = MEASURES[claim["noise_measure"]]
    found = []
    for pair in pairs:
        label = (f"{claim['noise_measure']} vs {pair[1]} ({unit})" if pair[0] != pair[1]
                 else f"{claim['noise_measure']}, each pair of neighbouring cells ({unit})")
        spreads = [declared_measure_spread(config, claim["noise_measure"], r) for r in pair]
        common = dict(claim=claim["id"], label=label, pretraining_seeds=1, finetuning_seeds="—", paper_gap=None,
                      power=None, false_rate=None, claim_false_rate=None, needs=None,
                      runs=pair if pair[0] != pair[1] else (), measure=claim["noise_measure"])
        if any(s is None for s in spreads):
            found.append(Part(**common, smallest=None, sources=(),
                              why=f"no declared spread of {claim['noise_measure']} in {NOISE.name}"))
            continue
        declared = figure_parts(spreads)
        variance = sum(v for v, _ in declared)
        df = satterthwaite(variance, declared)
        found.append(Part(**common, smallest=smallest_gap(Shape(variance, df, df), alpha),
                          sources=tuple(f"{claim['noise_measure']}: {f.described}" for f in dict.fromkeys(spreads))))
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


def power_table(config: dict, targets: list[str], builds: int = SIMULATED_BUILDS) -> list[Part]:
    """Every part of every claim the targets' tables check (`claim_power`)."""
    kinds = {t: config["tables"][t].get("kind", "objectives") for t in target_tables(config, targets)}
    return [part for table, kind in kinds.items() for claim in claims_decided_by(kind)
            for part in claim_power(config, table, claim, builds)]


@dataclass(frozen=True)
class Bill:
    """What a plan's GPU jobs cost (`maskbench plan`): in all, and per pretraining seed of each
    declared run (its instances' pretraining, fine-tuning and probes), to price more seeds."""

    gpu_hours: float
    per_seed: dict[str, float]

    def at(self, runs: tuple[str, ...], seeds: dict[str, int], needed: int) -> float:
        """The bill with `runs` at `needed` pretraining seeds each instead of `seeds`."""
        return self.gpu_hours + sum(self.per_seed.get(r, 0.0) * (needed - seeds[r]) for r in set(runs))


def verdict_line(part: Part, config: dict, bill: Bill | None) -> str:
    """Why a part is not decidable, and what would decide it."""
    if part.why:
        return f"not computed ({part.why})"
    if part.measure:
        return (f"in {MEASURES[part.measure]}, from the declared spread alone: one pretraining run per side (the "
                "analyses measure seed 0), so more pretraining seeds do not narrow it; the tokens' or blocks' own "
                "noise, known once built, widens it; no paper gap in this unit")
    if part.paper_gap is None:
        return "no paper gap to compare"
    if part.decided:
        return ""
    if part.needs is None:
        return (f"not decidable at any seed count up to {MOST_SEEDS} pretraining seeds per arm: "
                "its test sets' and fine-tuning seeds' noise alone is above the paper's gap")
    seeds = {r: len(pretraining_seeds(config, r)) for r in part.runs}
    cost = f", {bill.at(part.runs, seeds, part.needs):,.0f} GPU-h" if bill else ""
    return f"not decidable at this budget (needs {part.needs} pretraining seeds per arm{cost})"


def render(config: dict, targets: list[str], bill: Bill | None = None, builds: int = SIMULATED_BUILDS) -> str:
    """The power table for a terminal (at most WIDTH columns), with the noise figures' sources
    under it; with the plan's `bill`, GPU-hours per decided claim part and the price of the
    seeds that would decide the others."""
    parts = power_table(config, targets, builds)
    intro = (f"Power of profile `{config['profile']}` by the verdicts' rule (maskbench.power, noise figures "
             f"{NOISE.name}): the smallest gap decided at {POWER:.0%} power (non-central t, Holm over a claim's "
             "parts), the power at the paper's gap, and how often the rule decides a part between two equal recipes "
             f"at this shape (false: simulated through eval.verdict.compare_tasks, {builds} builds; nominal "
             f"{NOMINAL:.0%}{monte_carlo_note(builds)}). Seeds: pretraining x fine-tuning per arm.")
    lines = wrap(intro) + [""]
    width = min(max([len(p.label) for p in parts] + [4]), LABEL)
    header = (f"  {'part':<{width}}  {'seeds':>6}  {'smallest':>8}  {'paper':>6}  {'power':>6}  {'false':>6}"
              "  decidable")
    for claim in dict.fromkeys(p.claim for p in parts):
        mine = [p for p in parts if p.claim == claim]
        rate = mine[0].claim_false_rate
        runs = f" ({' vs '.join(mine[0].runs)})" if len({p.runs for p in mine}) == 1 and len(mine[0].runs) == 2 else ""
        lines += [*wrap(f"{claim}{runs}: any part decided between equal recipes "
                        + ("—" if rate is None else f"{rate:.1%}"), "", "  "), header]
        for p in mine:
            smallest = "—" if p.smallest is None else f"{p.smallest:.2f}"
            paper = "—" if p.paper_gap is None else f"{p.paper_gap:+.1f}"
            power = "—" if p.power is None else f"{p.power:.0%}"
            false = "—" if p.false_rate is None else f"{p.false_rate:.1%}"
            label = p.label if len(p.label) <= width else ""
            if not label:  # a long label on its own line, its numbers under it
                lines += wrap(p.label, "  ", "    ")
            seeds = f"{p.pretraining_seeds} x {p.finetuning_seeds}" if p.pretraining_seeds else "—"
            lines.append(f"  {label:<{width}}  {seeds:>6}  "
                         f"{smallest:>8}  {paper:>6}  {power:>6}  {false:>6}  {p.decidable}")
            why = verdict_line(p, config, bill)
            if why:
                lines += wrap(why, "    ", "    ")
        lines.append("")
    decided = [p for p in parts if p.decided]
    fine_tuned = [p for p in parts if p.pretraining_seeds and not p.measure]
    if fine_tuned and not decided and all(p.pretraining_seeds == 1 for p in fine_tuned):
        lines += wrap("One pretraining run per arm (the papers' practice) decides none of these claims: the rule "
                      "can only take the spread between pretraining seeds from noise.yaml. `maskbench plan TARGET "
                      "--seeds 3` prints the bill at three pretraining seeds a run.") + [""]
    summary = (f"Claim parts decidable at {POWER:.0%} power at the paper's gap with false decisions <= "
               f"{NOMINAL:.0%}: {len(decided)} of {len(parts)}")
    if bill:
        per = (f"{bill.gpu_hours / len(decided):,.1f} ({bill.gpu_hours:,.1f} GPU-h / {len(decided)})" if decided
               else f"none decided for {bill.gpu_hours:,.1f} GPU-h")
        summary += f"; GPU-hours per decided claim part: {per}"
    lines += wrap(summary) + ["", "Noise figures:"]
    for source in sorted({s for p in parts for s in p.sources}):
        lines += wrap(source, "- ", "  ")
    return "\n".join(lines + [""])


def monte_carlo_note(builds: int) -> str:
    """How far a simulated false-decision rate near the nominal one moves by chance over `builds`
    (its standard error): a printed 6.8 % over 400 builds is not yet above 5 %."""
    return f", a simulated rate near it known to ±{math.sqrt(NOMINAL * (1 - NOMINAL) / builds):.1%}" if builds else ""


def wrap(text: str, first: str = "", rest: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)
