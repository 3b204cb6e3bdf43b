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

from maskbench.config import grid_arms, grid_cell, table_cells
from maskbench.eval.verdict import A_BETTER, Comparison
from maskbench.report import figures as draw
from maskbench.report import markdown
from maskbench.report.analysis import learned_cell, own_mask_gap, read_measure
from maskbench.report.cells import (DID_NOT_LEARN_MARK, cell, column_header, control_lines, learning_context,
                                    pretrain_metrics, read_summaries)
from maskbench.report.evidence import TaskEvidence
from maskbench.report.departures import departure_lines
from maskbench.report.knobs import knobs_text
from maskbench.report.footer import dataset_lines, figure_links, generated_line, how_a_claim_is_decided, training_figure
from maskbench.report.missing import Missing
from maskbench.report.published import (Rendered, Verdict, benchmark_of, claim_of, control_run, decide, grid_citation,
                                        published_grid)


def rows(config: dict, table: str) -> list[tuple[int, float, str | None]]:
    """(k, p, run) in Tab. 4 order: per p, MLM (k = 1) then ExLM by k; None where no run of
    the table has that k and p."""
    spec, runs = config["tables"][table], config["runs"]
    filled = {grid_cell(runs[r]): r for r in grid_arms(config, table)}
    return [(k, p, filled.get((k, p))) for p in spec["p"] for k in [1, *spec["k"]]]


def render(config: dict, table: str, root: Path, figures: Path | None = None) -> Rendered:
    spec = config["tables"][table]
    layout = rows(config, table)
    pairs = table_cells(config, table)
    summaries = read_summaries(config, root, pairs)
    evidence = {t: TaskEvidence(config, t, root) for t in spec["tasks"]}
    entropy = {run: read_measure(root, run, "entropy") for _, _, run in layout if run}
    aligned = {run: read_measure(root, run, "alignment") for k, _, run in layout if run and k > 1}
    metrics = {run: pretrain_metrics(root, run) for _, _, run in layout if run}
    first = {t: next((s for (r, tt), s in summaries.items() if tt == t), None) for t in spec["tasks"]}
    header = ["p", "method", "run", "knobs (besides k, p)", *(column_header(config, t, first[t]) for t in spec["tasks"]),
              "entropy, bits (± std over tokens)", "own-state posterior; log P own / other masks' states",
              "nats below the unigram loss: own masks (validation loss)", "beats MLM at the same p?"]
    lines = [f"# {table}: {spec['title']}", "",
             (f"Profile `{config['profile']}`. Each row is the named run (pretraining corpus: its modality's, below; "
              "entropy on its validation blocks, from `maskbench analyse`), scores in % (RMSE as is) over fine-tuning "
              f"seeds as each column says. {DID_NOT_LEARN_MARK}: not better than the `none` control beyond the noise. "
              "Nats below the unigram loss: how much better than token frequencies the run predicts the masked "
              "tokens of its own masks (MLM: the tokens its entropy is measured on; ExLM: the DAG's likelihood of "
              "them, all alignments summed), and in brackets its pretraining validation loss's gap (15 % of tokens "
              "masked, whatever p the run trained with). "
              f"Own-state posterior {BY_CONSTRUCTION}: holds by construction, not by learning: in a sparse DAG "
              "(no edge between the states of one [MASK]) every path visits each [MASK]'s states once and emits its "
              "token there, so every masked token aligns to its own [MASK]'s states whatever the model learned; the "
              "log-probabilities beside it still measure the model. "
              f"`paper`: {grid_citation('exlm_table4')}, only in columns whose dataset is its benchmark."), ""]
    mlm_at = {p: run for k, p, run in layout if k == 1}
    verdicts, body = [], []
    for k, p, run in layout:
        method = "MLM" if k == 1 else f"ExLM k = {k}"
        if run is None:
            body.append([draw.percent(p), method, "no run declared", "—",
                         *["not computed (no run of the table has this k and p)"] * (len(spec["tasks"]) + 4)])
            continue
        row = [draw.percent(p), method, f"`{run}`", knobs_text(config, run, leave_out=("k", "mask_ratio"))]
        for task in spec["tasks"]:
            text = cell(summaries.get((run, task)), (run, task) in pairs)
            none = control_run(config, table, config["tasks"][task]["modality"])
            if (run, task) in pairs and none not in (None, run):
                learned = evidence[task].compare(run, none)
                if isinstance(learned, Comparison) and learned.outcome != A_BETTER:
                    text += f" {DID_NOT_LEARN_MARK}"
            paper = published_grid("exlm_table4", benchmark_of(config, task), k, p)
            row.append(text + ("" if paper is None else f" (paper {paper:.1f})"))
        found = entropy[run]
        row.append(str(found) if isinstance(found, Missing) else f"{found['bits']:.2f} ± {found['std_bits']:.2f} "
                   f"({found['tokens']:,} tokens)")
        row.append("—" if k == 1 else alignment_cell(aligned[run], by_construction=sparse_dag(config, run)))
        own = (own_mask_gap(run, found, metrics[run]) if k == 1
               else own_mask_gap(run, aligned[run], metrics[run], field="dag_nll"))
        row.append(learned_cell(own, metrics[run]))
        if k > 1:
            verdicts.append(Verdict(CLAIM, against_mlm(config, table, run, mlm_at.get(p), evidence),
                                    part=f"k = {k} (`{run}`), p = {draw.percent(p)}",
                                    context=learning_context(config, root, [run, *([mlm_at[p]] if mlm_at.get(p) else [])])))
        row.append("—" if k == 1 else verdicts[-1].text.split(":")[0])
        body.append(row)
    lines += [*markdown.table(header, body), "", *control_lines(config, table, root)]
    lines += ["", "Claims of ExLM Tab. 4, decided on our rows (the last column above):"]
    lines += [v.line() for v in verdicts]
    lines += ["", how_a_claim_is_decided(config)]
    if figures is not None:
        lines += ["", *figure_links(table, draw_figures(config, table, root, figures, layout, entropy))]
    lines += ["", *dataset_lines(config, spec["tasks"]), *departure_lines(config, table), "", generated_line(config, root, table), ""]
    return Rendered("\n".join(lines), verdicts)


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
