"""table6: the 0.9-effective rank of token representations by layer (MAE-LM Fig. 1, 5).

MAE-LM §2: the smallest number of singular values whose squared sum reaches 90 % of the total.
Per layer (0 = the embeddings' output) and per run of the table, from the analysis stage's
effective_rank.json (`maskbench.analysis.rank`, layer-normalised states): the paper's two
matrices, every token of inputs with 15 % [MASK] (real and [MASK] states) and of the same inputs
without; this project's variant, the real tokens of the input with [MASK] alone; and the [MASK]
representations alone; then the real tokens after fine-tuning (seed 1, Fig. 5b) where the
analysis has it. Below, MAE-LM's claim that it closes MLM's gap is decided on our numbers
(`closes_the_gap`: docs/tables.md "Tables 2, 3 and 6"), on the paper's matrices first, then on the
variant. The paper prints these ranks only as plots, so no published number stands beside ours.
"""

from __future__ import annotations

from pathlib import Path

from maskbench.config import corpus_datasets
from maskbench.report import figures as draw
from maskbench.report import markdown
from maskbench.report.analysis import read_measure
from maskbench.report.departures import departure_lines
from maskbench.report.knobs import knobs_text
from maskbench.report.footer import figure_links, generated_line, training_figure
from maskbench.report.missing import Missing
from maskbench.report.published import Rendered
from maskbench.report.table import TableKind, read_table

CARD = TableKind(
    name="effective_rank", label="effective rank by layer",
    columns=("layer",),  # then one per measured matrix of each run (`FIELDS`), or one saying why a run has none
    caption=("Profile `{profile}`. 0.9-effective rank (MAE-LM §2) of each run's token representations "
             "per layer (0 = embeddings), on the validation blocks of the run's pretraining corpus with the fixed "
             "analysis seed, from `maskbench analyse` (pretraining seed 0). The paper's gap is between its two "
             "matrices, every token state of the input with [MASK] (real and [MASK]) and of the input without; the "
             "real tokens only of the input with [MASK] are this project's variant. States are layer-normalised (a "
             "LayerNorm without parameters below the last layer, the encoder's own final LayerNorm at the last), as "
             "the papers' post-LN encoders output them. {rows}"
             "`—`: the run's analysis gives no number there. The paper draws these ranks (Fig. 1, 5) without "
             "printing them, so there is no published column."),
    claims="MAE-LM's claim, decided on our ranks:")

FIELDS = {"with_mask": "input with [MASK], real and [MASK] tokens (MAE-LM §2)",
          "real_without_mask": "input without [MASK] (MAE-LM §2)",
          "real_with_mask": "real tokens only, input with [MASK] (this project's variant)",
          "mask": "[MASK] tokens"}
# MLM's with-[MASK] matrix that each verdict compares with its without-[MASK] one: the paper's first
PARTS = {"with_mask": "MAE-LM §2's matrices (the input with [MASK]: real and [MASK] states)",
         "real_with_mask": "this project's variant (the input with [MASK]: real-token states only)"}


def by_layer(layers: list[dict], field: str) -> dict[int, int]:
    return {entry["layer"]: entry[field] for entry in layers if entry.get(field) is not None}


def first_of(config: dict, table: str, objective: str) -> str | None:
    return next((r for r in config["tables"][table]["runs"] if config["runs"][r]["objective"] == objective), None)


def render(config: dict, table: str, root: Path, figures: Path | None = None) -> Rendered:
    table_of, spec = read_table(config, table, root), config["tables"][table]
    found = {run: read_measure(root, run, "rank") for run in spec["runs"]}
    # a column per measured field of each run; one column saying why for a run without the file
    columns = [(run, field) for run in spec["runs"] if isinstance(found[run], dict)
               for field in FIELDS if by_layer(found[run]["layers"], field)]
    columns += [(run, None) for run in spec["runs"] if isinstance(found[run], Missing)]
    header = [*CARD.columns, *(f"`{run}`: {FIELDS[field]}" if field else f"`{run}`" for run, field in columns)]
    rows = "".join(f"`{r}`: {f['rows']:,} token representations per matrix. "
                   for r, f in found.items() if isinstance(f, dict))
    lines = [*table_of.opening(CARD, rows=rows),
             "Runs: " + "; ".join(f"`{r}` {config['runs'][r]['objective']} ({knobs_text(config, r)})"
                                  for r in spec["runs"]) + ".", "",
             *markdown.table(header, layer_rows(found, columns)), "", *finetuned_lines(found)]
    verdicts = [table_of.verdict("maelm_closes_rank_gap", closes_the_gap(config, table, found, field), spec["runs"],
                                 part=part) for field, part in PARTS.items()]
    lines += ["", CARD.claims, *(v.line() for v in verdicts)]
    if figures is not None:
        draw_figures(figures, found)
        training_figure(config, table, root, figures)
        lines += ["", *figure_links(table, {"rank.png": "effective rank against the layer (Fig. 1, 5)",
                                            "training.png": "training and validation loss of the table's runs"})]
    lines += ["", "Corpora (validation blocks):"]
    lines += [f"- `{run}`: {', '.join(corpus_datasets(config, config['runs'][run]['modality']))}"
              for run in spec["runs"]]
    lines += [*departure_lines(config, table), "", generated_line(config, root, table), ""]
    return Rendered("\n".join(lines), verdicts)


def layer_rows(found: dict, columns: list[tuple[str, str | None]]) -> list[list[str]]:
    """One row per layer any run measured (one "—" row where none did): each column's rank
    there, "—" where its run gives none, or why its run has no ranks at all."""
    layers = sorted({e["layer"] for f in found.values() if isinstance(f, dict) for e in f["layers"]})
    rows = []
    for layer in layers or [None]:
        row = [str(layer) if layer is not None else "—"]
        for run, field in columns:
            value = None if field is None else by_layer(found[run]["layers"], field).get(layer)
            row.append(str(found[run]) if field is None else "—" if value is None else str(value))
        rows.append(row)
    return rows


def finetuned_lines(found: dict) -> list[str]:
    """Fig. 5b: real-token ranks after fine-tuning (seed 1), per run, or why not."""
    lines = ["After fine-tuning (Fig. 5b; real tokens, input without [MASK], the fine-tuned encoder of seed 1):"]
    for run, f in found.items():
        if isinstance(f, Missing):
            lines.append(f"- `{run}`: {f}")
        elif f.get("finetuned") is None:
            lines.append(f"- `{run}`: not computed (the analysis has no fine-tuned encoder for this run)")
        else:
            tuned = f["finetuned"]
            ranks = ", ".join(f"{e['layer']}: {e['real_without_mask']}" for e in tuned["layers"])
            lines.append(f"- `{run}` on `{tuned['task']}` (seed {tuned['seed']}), rank by layer: {ranks}")
    return lines


def closes_the_gap(config: dict, table: str, found: dict, with_mask_field: str = "with_mask") -> str:
    """On each encoder layer (1 and up) where MLM's rank with [MASK] in the input (the matrix
    `with_mask_field`: the paper's, real and [MASK] states, or the real-token variant) exceeds
    its rank without by more than 2 m (m = `rank_margin`), MAE-LM closes the gap when its
    real-token rank is within m of MLM's with-[MASK] rank or above, leaves it when within m of
    MLM's without-[MASK] rank or below, and is in between (not decided) otherwise. The claim
    holds when it closes the gap on more such layers than it leaves it, and is not decided
    when MLM shows no gap larger than 2 m anywhere."""
    m = config["tables"][table]["rank_margin"]
    mlm, mae = first_of(config, table, "mlm"), first_of(config, table, "mae_lm")
    if mlm is None or mae is None:
        return (f"not checked: needs an `mlm` and a `mae_lm` run in the table "
                f"(found {markdown.names(mlm)} and {markdown.names(mae)})")
    if any(isinstance(found[r], Missing) for r in (mlm, mae)):
        return f"not computed: `{mlm}` {found[mlm] if isinstance(found[mlm], Missing) else 'ok'}; `{mae}` " + (
            str(found[mae]) if isinstance(found[mae], Missing) else "ok")
    with_mask = by_layer(found[mlm]["layers"], with_mask_field)
    if not with_mask:
        return (f"not computed: `{mlm}`'s effective_rank.json has no `{with_mask_field}` ranks (written before "
                "that matrix was measured: run `maskbench analyse` again)")
    without = by_layer(found[mlm]["layers"], "real_without_mask")
    mae_rank = by_layer(found[mae]["layers"], "real_without_mask") or by_layer(found[mae]["layers"], "real_with_mask")
    gaps = [layer for layer in sorted(with_mask) if layer >= 1 and layer in without and layer in mae_rank
            and with_mask[layer] - without[layer] > 2 * m]
    rule = (f"rule: on each encoder layer where MLM's rank with [MASK] ({FIELDS[with_mask_field]}) exceeds the "
            f"rank without by more "
            f"than {2 * m}, MAE-LM closes the gap when its real-token rank is at least MLM's with-[MASK] rank - {m}, "
            f"leaves it when at most MLM's without-[MASK] rank + {m}; holds when closed on more such layers than left")
    if not gaps:
        return f"not decided: MLM (`{mlm}`) shows no gap larger than {2 * m} dimensions on any encoder layer ({rule})"
    closed = [layer for layer in gaps if mae_rank[layer] >= with_mask[layer] - m]
    left = [layer for layer in gaps if mae_rank[layer] <= without[layer] + m]
    verdict = "holds" if len(closed) > len(left) else "does not hold" if len(closed) < len(left) else (
        "mixed" if closed else "not decided")
    detail = ", ".join(f"layer {layer}: MLM {with_mask[layer]} with / {without[layer]} without, MAE-LM "
                       f"{mae_rank[layer]}"
                       for layer in gaps)
    return (f"{verdict}: closed on {len(closed)}, left on {len(left)} of {len(gaps)} layers with a gap "
            f"({detail}; `{mlm}` against `{mae}`; {rule})")


def draw_figures(figures: Path, found: dict) -> None:
    """rank.png: ranks with and without [MASK] (Fig. 1a, 5a; the real-token variant beside them),
    [MASK] ranks (Fig. 1b), after fine-tuning (Fig. 5b)."""
    runs = {run: f for run, f in found.items() if isinstance(f, dict)}
    real = {f"{run}: {FIELDS[field]}": sorted(by_layer(f["layers"], field).items())
            for run, f in runs.items() for field in ("with_mask", "real_without_mask", "real_with_mask")}
    mask = {run: sorted(by_layer(f["layers"], "mask").items()) for run, f in runs.items()}
    tuned = {f"{run} on {f['finetuned']['task']}":
             sorted(by_layer(f["finetuned"]["layers"], "real_without_mask").items())
             for run, f in runs.items() if f.get("finetuned")}
    draw.rank_by_layer(figures / "rank.png", {"inputs with and without [MASK] (Fig. 1a, 5a)": real,
                                              "[MASK] tokens (Fig. 1b)": mask,
                                              "real tokens after fine-tuning (Fig. 5b)": tuned}, "0.9-effective rank")
