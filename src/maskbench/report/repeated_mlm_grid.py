"""table2: the Repeated MLM (k, p) grid of ExLM Fig. 3-5 (App. C, E, F).

Every token repeated k times, then a share p of the copies masked: the share of [MASK] in the
input stays p while the share of tokens whose every copy is masked (corrupted semantics) is
p^k. One row per cell the paper runs (p^k at least `min_corruption`, its Fig. 4 pattern; k = 1
is plain MLM at ratio p), each from the run of the table that has that k and mask ratio:
downstream score per task (as table1, † where the run is not better than the `none` control
beyond the noise), the corruption the analysis stage measured on the masks the objective draws
beside p^k and its App. C interval, the prediction entropy in bits, and the paper's numbers
beside ours. Three claims of ExLM §3 are then decided on our cells, each by a rule stated with
its verdict (docs/tables.md "Tables 2, 3 and 6"):

- equal corruption, equal score: adjacent cells of a diagonal (same p^k) score alike, within
  `equal_within`, by the paired bootstrap of table1;
- too little and too much corruption both hurt: on each task the best cell of the middle
  diagonals beats the best cell of the lowest and of the highest diagonal beyond the noise;
- entropy rises with corruption: of two neighbouring cells (same k, next p; same p, next k) the
  more corrupted has the higher entropy, beyond the noise of the difference: the tokens' and,
  each cell being one pretraining run, the pretraining spread noise.yaml declares for entropy.
"""

from __future__ import annotations

import math
from pathlib import Path

from maskbench.config import grid_arms, grid_cell, pretrained, task_seeds
from maskbench.eval.metrics import higher_is_better, metric_label
from maskbench.eval.verdict import (A_BETTER, B_BETTER, DID_NOT_LEARN, NO_DECLARED_SPREAD, UNDECIDED, claim_outcome,
                                   compare_measured, decided_counts)
from maskbench.power import declared_measure_spread
from maskbench.report import figures as draw
from maskbench.report import markdown
from maskbench.report.analysis import learned_cell, own_mask_gap, read_measure
from maskbench.report.cells import control_lines, pretrain_metrics
from maskbench.report.evidence import TaskEvidence
from maskbench.report.departures import departure_lines
from maskbench.report.footer import dataset_lines, figure_links, generated_line, how_a_claim_is_decided, training_figure
from maskbench.report.missing import Missing
from maskbench.report.published import (Rendered, benchmark_of, claim_of, control_run, grid_citation, load_published,
                                        published_grid)
from maskbench.report.table import TASKS, Table, TableKind, read_table

CARD = TableKind(
    name="repeated_mlm_grid", label="Repeated MLM (k, p) grid",
    columns=("k", "p", "p^k", "run", "corrupted semantics, measured [App. C 95 % interval]",
             "entropy, bits (± std over tokens)", "nats below the unigram loss: fully masked tokens (validation loss)",
             TASKS, "paper: MNLI acc. (Fig. 3)"),
    caption=("Profile `{profile}`. One row per cell of ExLM Fig. 4 (p^k ≥ {min_corruption:.3g} %; "
             "k = 1 is MLM at ratio p), each from the named run (pretraining corpus: the run's modality's, below; "
             "corruption and entropy on its validation blocks, written by `maskbench analyse`). Scores in % (RMSE as "
             "is) over fine-tuning seeds as each column says. {did_not_learn}: not better than the `none` "
             "control beyond the noise. Nats below the unigram loss: how much better than token frequencies the "
             "run predicts the tokens its entropy is measured on (every copy masked, on the masks it draws), and "
             "in brackets its pretraining validation loss's gap (15 % of tokens with every copy masked and nothing "
             "else: not the input a Repeated MLM or an MLM at another ratio trained on). `paper`: the paper's "
             "numbers (base-size text models, MNLI; {citations})."),
    claims="Claims of ExLM §3 (Fig. 3-5), decided on our cells:")
Cell = tuple[int, float]
ALIKE, DIFFER = "alike", "differ"


def corruption_level(k: int, p: float) -> float:
    """p^k to two significant digits: the paper prints p to three (38.7 %), so the cells of one
    diagonal agree only to about 1 % (0.387^4 = 2.243 %, 0.15^2 = 2.25 %); two digits put them
    on the same diagonal and keep the diagonals apart."""
    return float(f"{p ** k:.2g}")


def layout(config: dict, table: str) -> list[tuple[Cell, str | None]]:
    """The grid's cells in Fig. 4 order (k down, p across; p^k at least `min_corruption`), each
    with the table's run that fills it, or None."""
    spec, runs = config["tables"][table], config["runs"]
    filled = {grid_cell(runs[r]): r for r in grid_arms(config, table)}
    floor = corruption_level(1, spec["min_corruption"])
    return [((k, p), filled.get((k, p))) for k in spec["k"] for p in spec["p"] if corruption_level(k, p) >= floor]


# what a SMILES tokenizer's vocabulary holds: the corpus decides it (MOSES: about 40 tokens)
SMILES_CEILING = "a SMILES vocabulary of a few dozen tokens, about 5.3 bits (MOSES's ~40 tokens)"


def scale_lines(config: dict, runs: list[str]) -> list[str]:
    """What the corruption and entropy columns can show: a share **outside** its interval, and
    entropy's ceiling, log2 of the vocabulary's size, which puts a SMILES grid's entropies on
    another scale than the paper's text ones (Fig. 5)."""
    ceilings = []
    for modality in sorted({config["runs"][run]["modality"] for run in runs}):
        if modality == "text":
            size = config["tokenizer"]["text"]["vocab_size"]
            ceilings.append(f"log2 {size:,} = {math.log2(size):.1f} bits for this profile's text tokenizer")
        else:
            ceilings.append(SMILES_CEILING)
    paper = max(v for by_p in load_published()["grids"]["exlm_fig5"]["cells"]["entropy_bits"].values()
                for v in by_p.values())
    return ["Corrupted semantics: **outside** marks a share outside the interval a Binomial(tokens, p^k) count "
            "falls in 95 % of the time (App. C's model): each block draws an exact number of masks, without "
            "replacement, so in short blocks the share departs from p^k (`maskbench.analysis.corruption`).",
            f"Entropy is at most log2 of the vocabulary's size: {'; '.join(ceilings) or 'no run yet'}. The paper's "
            f"(Fig. 5, up to {paper:.2f} bits) are a 12-layer text model's over its own vocabulary: compare how "
            "entropy rises from cell to cell, not its values."]


def corruption_cell(found: dict | Missing) -> str:
    if isinstance(found, Missing):
        return str(found)
    verdict = "within" if found["within"] else "**outside**"
    lo, hi = found["interval"]
    return (f"{100 * found['share']:.2f} % [{100 * lo:.2f}, {100 * hi:.2f}] of {found['tokens']:,} tokens, "
            f"{verdict} p^k's interval")


def entropy_cell(found: dict | Missing, paper: float | None) -> str:
    ours = (str(found) if isinstance(found, Missing)
            else f"{found['bits']:.2f} ± {found['std_bits']:.2f} ({found['tokens']:,} tokens)")
    return ours + ("" if paper is None else f"; paper {paper:.2f}")


def render(config: dict, table: str, root: Path, figures: Path | None = None) -> Rendered:
    found, cells = read_table(config, table, root), layout(config, table)
    measured = {run: {m: read_measure(root, run, m) for m in ("corruption", "entropy")} for _, run in cells if run}
    metrics = {run: pretrain_metrics(root, run) for _, run in cells if run}
    gaps = {run: own_mask_gap(run, measured[run]["entropy"], metrics[run]) for run in metrics}
    body = [row_cells(found, k, p, run, measured.get(run), gaps.get(run), metrics.get(run)) for (k, p), run in cells]
    citations = "; ".join(grid_citation(f) for f in ("exlm_fig3", "exlm_fig5", "exlm_fig8"))
    lines = [*found.opening(CARD, min_corruption=100 * found.spec["min_corruption"], citations=citations),
             *markdown.table(found.header(CARD), body), "", *scale_lines(config, [run for _, run in cells if run]),
             "", *control_lines(config, table, root)]
    runs = pretrained(config, found.spec["runs"])
    verdicts = [found.verdict("equal_corruption_alike", diagonal_claim(config, table, cells, found.evidence), runs),
                found.verdict("corruption_extremes_hurt", extremes_claim(config, table, cells, found.evidence), runs),
                found.verdict("entropy_rises_with_corruption", entropy_claim(config, cells, measured, gaps), runs)]
    lines += ["", CARD.claims, *(v.line() for v in verdicts), "", how_a_claim_is_decided(config)]
    if figures is not None:
        shown = draw_figures(config, table, root, figures, cells, found.summaries, measured)
        lines += ["", *figure_links(table, shown)]
    lines += ["", *dataset_lines(config, found.spec["tasks"]), *departure_lines(config, table), "",
              generated_line(config, root, table), ""]
    return Rendered("\n".join(lines), verdicts)


def row_cells(found: Table, k: int, p: float, run: str | None, measured: dict | None, gap, metrics) -> list[str]:
    """The grid's (k, p) row: its run, what the analysis measured of it, each task's cell with
    Fig. 8's number beside it, Fig. 3's MNLI number; "not computed" throughout without a run."""
    config, tasks = found.config, found.spec["tasks"]
    row = [str(k), draw.percent(p), f"{100 * p ** k:.2f} %"]
    if run is None:
        row += ["no run declared", *["not computed (no run of the table has this k and p)"] * (4 + len(tasks))]
    else:
        papers = {t: published_grid("exlm_fig8", benchmark_of(config, t), k, p) for t in tasks}
        row += [f"`{run}` ({config['runs'][run]['objective']})", corruption_cell(measured["corruption"]),
                entropy_cell(measured["entropy"], published_grid("exlm_fig5", "entropy_bits", k, p)),
                learned_cell(gap, metrics),
                *(found.task_cell(run, t, after="" if papers[t] is None else f" (paper {papers[t]:.1f})")
                  for t in tasks)]
    fig3 = published_grid("exlm_fig3", "mnli", k, p)
    return row + ["—" if fig3 is None else f"{fig3:.1f}"]


def draw_figures(config: dict, table: str, root: Path, figures: Path, cells: list[tuple[Cell, str | None]],
                 summaries: dict, measured: dict) -> dict[str, str]:
    """The Fig. 3-5 heatmaps (score per task, measured corruption, entropy) and the training
    curves; returns file name -> what it shows."""
    spec = config["tables"][table]
    grid = {c for c, _ in cells}
    shown = {}
    for task in spec["tasks"]:
        metric = config["tasks"][task]["metric"]
        scale = 1 if metric == "rmse" else 100

        def summarised(key: str) -> dict:
            return {c: (summaries[run, task][key] * scale if (run, task) in summaries
                        and draw.finite(summaries[run, task]["value"]) is not None else None) for c, run in cells}

        name = f"score-{task}.png"
        label = metric_label(metric) + ("" if scale == 1 else " (%)")
        draw.heatmap(figures / name, spec["k"], spec["p"], summarised("value"),
                     f"{config['tasks'][task]['label']}: {label}, ± std of {len(task_seeds(config, task))} "
                     "fine-tuning seeds", label, cells=grid, spreads=summarised("std"))
        shown[name] = f"{task} score over (k, p) (Fig. 3 layout)"

    def measure(name: str, key: str, scale: float) -> dict:
        return {c: (measured[run][name][key] * scale if run and isinstance(measured[run][name], dict) else None)
                for c, run in cells}

    draw.heatmap(figures / "corruption.png", spec["k"], spec["p"], measure("corruption", "share", 100),
                 "corrupted semantics, measured (%); p^k by design (Fig. 4)", "share of tokens fully masked (%)",
                 fmt="{:.2f}", cells=grid)
    draw.heatmap(figures / "entropy.png", spec["k"], spec["p"], measure("entropy", "bits", 1),
                 "prediction entropy on fully masked tokens (Fig. 5), ± std over tokens", "entropy (bits)",
                 fmt="{:.2f}", cells=grid, spreads=measure("entropy", "std_bits", 1))
    training_figure(config, table, root, figures)
    return {**shown, "corruption.png": "measured corruption over (k, p) (Fig. 4 layout)",
            "entropy.png": "prediction entropy over (k, p) (Fig. 5 layout)",
            "training.png": "training and validation loss of the table's runs"}


def _majority(outcomes: list[str], support: str, against: str, unit: str) -> str:
    """The claim's outcome by its decided outcomes (`claim_outcome`), and the counts."""
    return (f"{claim_outcome(outcomes, support, against)}: {outcomes.count(support)} {support}, "
            f"{outcomes.count(against)} {against}; {decided_counts(outcomes, unit, support, against)}")


def _learned(evidence: TaskEvidence, none: str | None, runs: list[str]) -> bool | Missing:
    """Whether every run beat the `none` control beyond the noise (True without a control), or
    why it cannot be said."""
    if none is None:
        return True
    checks = [evidence.compare_runs(r, none) for r in runs]
    missing = next((c for c in checks if isinstance(c, Missing)), None)
    return missing if missing else all(c.outcome == A_BETTER for c in checks)


def diagonal_claim(config: dict, table: str, cells: list[tuple[Cell, str | None]], evidence: dict) -> str:
    """Adjacent cells of each diagonal (same p^k), on each task: alike when the bootstrap
    interval of their difference lies within ± `equal_within`, differ when it excludes zero
    (and is not within the margin), else not decided; a pair where either run did not learn
    leaves the claim."""
    spec = config["tables"][table]
    margin = spec["equal_within"]
    diagonals: dict[float, list[str]] = {}
    for (k, p), run in sorted(cells, key=lambda c: c[0][0]):
        if run:
            diagonals.setdefault(corruption_level(k, p), []).append(run)
    pairs = [(a, b) for runs in diagonals.values() for a, b in zip(runs, runs[1:])]
    if not pairs:
        return "not checked: no diagonal has two cells with runs"
    outcomes, lacking = [], []
    for task in spec["tasks"]:
        none = control_run(config, table, config["tasks"][task]["modality"])
        for a, b in pairs:
            found, learned = evidence[task].compare(a, b), _learned(evidence[task], none, [a, b])
            problem = next((c for c in (found, learned) if isinstance(c, Missing)), None)
            if problem:
                lacking.append(f"{task} `{a}`/`{b}`: {problem}")
            elif not learned:
                outcomes.append(DID_NOT_LEARN)
            elif -margin <= found.low and found.high <= margin:
                outcomes.append(ALIKE)
            elif found.outcome != UNDECIDED:
                outcomes.append(DIFFER)
            else:
                outcomes.append(UNDECIDED)
    if lacking:
        return "not computed: " + "; ".join(lacking)
    return (_majority(outcomes, ALIKE, DIFFER, "comparisons (neighbouring cells of a diagonal, on each task)")
            + f" (rule: alike when the {100 * config['verdicts']['confidence']:g} % bootstrap interval of the "
            f"difference lies within ± {margin:g}, differ when it excludes zero; the claim holds when more pairs are "
            "alike than differ)")


def extremes_claim(config: dict, table: str, cells: list[tuple[Cell, str | None]], evidence: dict) -> str:
    """On each task: the best cell (by its mean over seeds) of the middle diagonals against the
    best of the least and of the most corrupted diagonal. Holds on the task when it beats both
    beyond the noise, does not when either beats it, not decided otherwise; did not learn when
    the middle cell does not beat `none`."""
    spec = config["tables"][table]
    levels = sorted({corruption_level(k, p) for (k, p), run in cells if run})
    if len(levels) < 3:
        return f"not checked: needs cells on three diagonals at least, found {len(levels)}"
    outcomes, lacking, chosen = [], [], []
    for task in spec["tasks"]:
        metric, found = config["tasks"][task]["metric"], evidence[task]
        arms = {run: found.arm(run) for _, run in cells if run}
        missing = [f"{task} `{r}`: {a}" for r, a in arms.items() if isinstance(a, Missing)]
        if missing:
            lacking += missing
            continue
        sign = 1 if higher_is_better(metric) else -1
        centre = {run: sign * arm[:, 0].mean() for run, arm in arms.items()}  # mean over seeds, all examples
        middle, low, high = (max((run for (k, p), run in cells if run and corruption_level(k, p) in of), key=centre.get)
                             for of in (levels[1:-1], levels[:1], levels[-1:]))
        chosen.append(f"{task}: `{middle}` against `{low}` and `{high}`")
        learned = _learned(found, control_run(config, table, config["tasks"][task]["modality"]), [middle])
        if isinstance(learned, Missing):
            lacking.append(f"{task}: {learned}")
            continue
        against = [found.compare(middle, r).outcome for r in (low, high)]
        outcomes.append(DID_NOT_LEARN if not learned else A_BETTER if against == [A_BETTER] * 2
                        else B_BETTER if B_BETTER in against else UNDECIDED)
    if lacking:
        return "not computed: " + "; ".join(lacking)
    words = [{A_BETTER: "middle best", B_BETTER: "an extreme as good or better"}.get(o, o) for o in outcomes]
    return (_majority(words, "middle best", "an extreme as good or better", "tasks") + f" ({'; '.join(chosen)}; rule: "
            "per task, the best middle-diagonal cell must beat the best cell of the least and of the most corrupted "
            "diagonal by the paired bootstrap; the claim holds on more such tasks than tasks where an extreme wins)")


def entropy_claim(config: dict, cells: list[tuple[Cell, str | None]], measured: dict, gaps: dict) -> str:
    """Neighbouring cells (same k, next p; same p, next k): the more corrupted one's entropy
    is higher (rises), lower (falls), or inside the noise of the difference (not decided). The
    noise is the tokens' (std_bits / sqrt(tokens) per cell) and, each cell being one pretraining
    run of its recipe (the analyses measure seed 0), the spread between pretraining seeds
    noise.yaml declares for entropy on the cells' corpus (`compare_measured`); without one no
    pair is decided. A pair with a run that does not predict those fully masked tokens
    `verdicts.learned_gap` nats better than the unigram loss (`gaps`, see `own_mask_gap`) did
    not learn: a model at the unigram plateau predicts token frequencies whatever it sees, so its
    entropy says nothing about corruption."""
    learned_gap = config["verdicts"]["learned_gap"]
    measure = claim_of("entropy_rises_with_corruption")["noise_measure"]
    by_cell = {c: run for c, run in cells if run}
    ks = sorted({k for k, _ in by_cell})
    ps = sorted({p for _, p in by_cell})
    neighbours = [((k, a), (k, b)) for k in ks for a, b in zip(ps, ps[1:])]
    neighbours += [((b, p), (a, p)) for p in ps for a, b in zip(ks, ks[1:])]  # fewer copies: more corrupted
    neighbours = [(less, more) for less, more in neighbours if less in by_cell and more in by_cell]
    if not neighbours:
        return "not checked: no two neighbouring cells have runs"
    outcomes, lacking, spreads = [], [], {}
    for less, more in neighbours:
        found = [measured[by_cell[c]]["entropy"] for c in (less, more)]
        problem = next((f for f in found if isinstance(f, Missing)), None)
        if problem:
            lacking.append(f"`{by_cell[less]}`/`{by_cell[more]}`: {problem}")
            continue
        gap_of = [gaps[by_cell[c]] for c in (less, more)]
        problem = next((g for g in gap_of if isinstance(g, Missing)), None)
        if problem:
            lacking.append(f"`{by_cell[less]}`/`{by_cell[more]}`: {problem}")
            continue
        if min(gap_of) < learned_gap:
            outcomes.append(DID_NOT_LEARN)
            continue
        (a, b) = found
        declared = [declared_measure_spread(config, measure, by_cell[c]) for c in (more, less)]
        spreads.update(dict.fromkeys(s.described if s else NO_DECLARED_SPREAD for s in declared))
        tokens = a["std_bits"] ** 2 / a["tokens"] + b["std_bits"] ** 2 / b["tokens"]
        decided = compare_measured(b["bits"] - a["bits"], tokens, declared, config["verdicts"]["confidence"])
        outcomes.append({A_BETTER: "rises", B_BETTER: "falls"}.get(decided.outcome, UNDECIDED))
    if lacking:
        return "not computed: " + "; ".join(lacking)
    return (_majority(outcomes, "rises", "falls", "pairs of neighbouring cells")
            + " (rule: the more corrupted cell's entropy is higher (rises) or lower (falls) when the "
            f"{100 * config['verdicts']['confidence']:g} % interval of the difference excludes zero; its variance is "
            "the tokens' (std/√tokens per cell, tokens taken as independent) plus, each cell being one pretraining "
            "run, the spread between pretraining seeds noise.yaml declares for entropy on the corpus, Student's t on "
            f"its degrees of freedom ({'; '.join(spreads) or 'no pair compared'}), and without one a pair is not "
            f"decided; a pair with a run whose cross-entropy on those tokens is less than {learned_gap} nats below its "
            "corpus's unigram loss did not learn; the claim holds when more pairs rise than fall)")
