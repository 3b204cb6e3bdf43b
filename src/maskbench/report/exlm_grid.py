"""table3: ExLM with k states per [MASK] against MLM at the same mask ratio (ExLM Tab. 4, Fig.
12, Fig. 10).

For each mask ratio p of the table, the MLM run at p, then one row per ExLM run at p (k
states): the downstream score per task (as table1: † where the run is not better than the
`none` control beyond the noise; the paper's Tab. 4 number beside ours where the task's
dataset is its benchmark), the prediction entropy on masked tokens (averaged over an ExLM
token's k states), how sharply its states align to the masked tokens (`alignment.json`: the
share of a token's alignment posterior on its own [MASK]'s states, and a masked token's
log-probability at its own against the other masks' states: equal when the states predict
the same thing everywhere, as a unigram model does), and the verdict on "ExLM with k states
beats MLM at p" by table1's rule (the paired bootstrap per task, a majority over the decided
tasks). The figures: entropy against p for MLM and each k (Fig. 12), the DAG case study of the
table's `case_study` run (Fig. 10), the training curves.
"""

from __future__ import annotations

from pathlib import Path

from maskbench.config import grid_arms, grid_cell
from maskbench.report import figures as draw
from maskbench.report import markdown
from maskbench.report.analysis import learned_cell, own_mask_gap, read_measure
from maskbench.report.cells import control_lines, pretrain_metrics
from maskbench.report.departures import departure_lines
from maskbench.report.knobs import knobs_text
from maskbench.report.footer import dataset_lines, figure_links, generated_line, how_a_claim_is_decided, training_figure
from maskbench.report.missing import Missing
from maskbench.report.published import Rendered, Verdict, benchmark_of, claim_of, decide, grid_citation, published_grid
from maskbench.report.table import TASKS, Table, TableKind, read_table

CARD = TableKind(
    name="exlm_grid", label="ExLM k × p grid",
    columns=("p", "method", "run", "knobs (besides k, p)", TASKS, "entropy, bits (± std over tokens)",
             "own-state posterior; log P own / other masks' states",
             "nats below the unigram loss: own masks (validation loss)", "beats MLM at the same p?"),
    caption=("Profile `{profile}`. Each row is the named run (pretraining corpus: its modality's, below; "
             "entropy on its validation blocks, from `maskbench analyse`), scores in % (RMSE as is) over fine-tuning "
             "seeds as each column says. {did_not_learn}: not better than the `none` control beyond the noise. "
             "Nats below the unigram loss: how much better than token frequencies the run predicts the masked "
             "tokens of its own masks (MLM: the tokens its entropy is measured on; ExLM: the DAG's likelihood of "
             "them, all alignments summed), and in brackets its pretraining validation loss's gap (15 % of tokens "
             "masked, whatever p the run trained with). "
             "Own-state posterior {by_construction}: holds by construction, not by learning: in a sparse DAG "
             "(no edge between the states of one [MASK]) every path visits each [MASK]'s states once and emits its "
             "token there, so every masked token aligns to its own [MASK]'s states whatever the model learned; the "
             "log-probabilities beside it still measure the model. "
             "`paper`: {citation}, only in columns whose dataset is its benchmark."),
    claims="Claims of ExLM Tab. 4, decided on our rows (the last column above):")


def rows(config: dict, table: str) -> list[tuple[int, float, str | None]]:
    """(k, p, run) in Tab. 4 order: per p, MLM (k = 1) then ExLM by k; None where no run of
    the table has that k and p."""
    spec, runs = config["tables"][table], config["runs"]
    filled = {grid_cell(runs[r]): r for r in grid_arms(config, table)}
    return [(k, p, filled.get((k, p))) for p in spec["p"] for k in [1, *spec["k"]]]


def render(config: dict, table: str, root: Path, figures: Path | None = None) -> Rendered:
    found, layout = read_table(config, table, root), rows(config, table)
    measured = {run: {"entropy": read_measure(root, run, "entropy"), "metrics": pretrain_metrics(root, run),
                      **({"alignment": read_measure(root, run, "alignment")} if k > 1 else {})}
                for k, _, run in layout if run}
    mlm_at = {p: run for k, p, run in layout if k == 1}
    verdicts = {run: found.verdict(CLAIM, against_mlm(config, table, run, mlm_at.get(p), found.evidence),
                                   [run, *([mlm_at[p]] if mlm_at.get(p) else [])],
                                   part=f"k = {k} (`{run}`), p = {draw.percent(p)}")
                for k, p, run in layout if run and k > 1}
    body = [row_cells(found, k, p, run, measured.get(run), verdicts.get(run)) for k, p, run in layout]
    lines = [*found.opening(CARD, by_construction=BY_CONSTRUCTION, citation=grid_citation("exlm_table4")),
             *markdown.table(found.header(CARD), body), "", *control_lines(config, table, root)]
    lines += ["", CARD.claims, *(v.line() for v in verdicts.values()), "", how_a_claim_is_decided(config)]
    if figures is not None:
        entropy = {run: m["entropy"] for run, m in measured.items()}
        lines += ["", *figure_links(table, draw_figures(config, table, root, figures, layout, entropy))]
    lines += ["", *dataset_lines(config, found.spec["tasks"]), *departure_lines(config, table), "",
              generated_line(config, root, table), ""]
    return Rendered("\n".join(lines), list(verdicts.values()))


def row_cells(found: Table, k: int, p: float, run: str | None, measured: dict | None,
              verdict: Verdict | None) -> list[str]:
    """The row of MLM (k = 1) or ExLM with k states at mask ratio p: each task's cell with
    Tab. 4's number beside it, the entropy, the alignment and the own-mask gap the analysis
    measured, and the verdict's outcome against MLM at p; "not computed" throughout without a run."""
    config, tasks = found.config, found.spec["tasks"]
    method = "MLM" if k == 1 else f"ExLM k = {k}"
    if run is None:
        return [draw.percent(p), method, "no run declared", "—",
                *["not computed (no run of the table has this k and p)"] * (len(tasks) + 4)]
    papers = {t: published_grid("exlm_table4", benchmark_of(config, t), k, p) for t in tasks}
    entropy, metrics = measured["entropy"], measured["metrics"]
    own = (own_mask_gap(run, entropy, metrics) if k == 1
           else own_mask_gap(run, measured["alignment"], metrics, field="dag_nll"))
    return [draw.percent(p), method, f"`{run}`", knobs_text(config, run, leave_out=("k", "mask_ratio")),
            *(found.task_cell(run, t, after="" if papers[t] is None else f" (paper {papers[t]:.1f})") for t in tasks),
            str(entropy) if isinstance(entropy, Missing) else (f"{entropy['bits']:.2f} ± {entropy['std_bits']:.2f} "
                                                              f"({entropy['tokens']:,} tokens)"),
            "—" if k == 1 else alignment_cell(measured["alignment"], by_construction=sparse_dag(config, run)),
            learned_cell(own, metrics), "—" if verdict is None else verdict.text.split(":")[0]]


CLAIM = "exlm_states_beat_mlm"  # ExLM Tab. 4, one verdict per ExLM row

# what follows an own-state posterior that the DAG forces, whatever the model learned
BY_CONSTRUCTION = "(by construction: sparse DAG)"


def sparse_dag(config: dict, run: str) -> bool:
    """Whether the run's DAG is sparse (ExLM Tab. 13: no edge between the states of one [MASK]).
    A path then visits each [MASK]'s states once, in order, and emits one token there: every
    masked token aligns to its own [MASK]'s states, so the own-state posterior is 1 by
    construction (random transitions and emissions give 1.000 sparse against 0.00-0.18 dense)."""
    spec = config["runs"][run]
    return spec["objective"] == "exlm" and spec.get("knobs", {}).get("transitions") == "sparse"


def alignment_cell(found: dict | Missing, by_construction: bool = False) -> str:
    """An ExLM row's alignment: own-state posterior (beside the even share 1/m; marked
    BY_CONSTRUCTION where the sparse DAG forces it) and the masked tokens' log-probabilities at
    their own and at the other masks' states."""
    if isinstance(found, Missing):
        return str(found)
    other = "—" if found["other_log_prob"] is None else f"{found['other_log_prob']:.2f}"
    mark = f" {BY_CONSTRUCTION}" if by_construction else ""
    return (f"{found['own_posterior']:.2f}{mark} (even: {found['even_share']:.2f}); "
            f"{found['own_log_prob']:.2f} / {other} nats")


def against_mlm(config: dict, table: str, exlm: str, mlm: str | None, evidence: dict) -> str:
    """ExLM Tab. 4's claim for one row: the ExLM run beats the MLM run at its p, by table1's rule."""
    if mlm is None:
        return "not checked: no MLM run at this p in the table"
    return decide(config, table, exlm, mlm, evidence, claim_of(CLAIM))


def draw_figures(config: dict, table: str, root: Path, figures: Path, layout: list, entropy: dict) -> dict[str, str]:
    """entropy.png (Fig. 12), case_study.png (Fig. 10), training.png; file name -> what it shows."""
    spec = config["tables"][table]
    series = {("MLM" if k == 1 else f"ExLM k = {k}"): [] for k in [1, *spec["k"]]}
    missing = []
    for k, p, run in layout:
        name = "MLM" if k == 1 else f"ExLM k = {k}"
        if run and isinstance(entropy[run], dict):
            series[name].append((100 * p, entropy[run]["bits"]))
        else:
            missing.append(f"{name} at {draw.percent(p)}")
    draw.lines(figures / "entropy.png", series, "prediction entropy on masked tokens (ExLM Fig. 12)",
               "mask ratio p (%)", "entropy (bits)", [(100 * p, draw.percent(p)) for p in spec["p"]], missing)
    case = spec.get("case_study")
    found = read_measure(root, case, "case_study") if case else Missing("no case_study run declared for the table")
    title = f"ExLM DAG case study (Fig. 10): `{case}`"
    if isinstance(found, Missing):
        draw.not_computed(figures / "case_study.png", title, str(found))
    else:
        draw.case_study(figures / "case_study.png", found, title)
    training_figure(config, table, root, figures)
    return {"entropy.png": "prediction entropy against p, MLM and ExLM per k (Fig. 12)",
            "case_study.png": f"DAG transitions and each state's top-3 tokens of `{case}` (Fig. 10)",
            "training.png": "training and validation loss of the table's runs"}
