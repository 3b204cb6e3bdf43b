"""The report tables' figures: one PNG per picture a paper draws, from the same numbers the
table prints (ExLM Fig. 3-5, 10, 12; MAE-LM Fig. 1, 5; training curves of a table's runs).

Every function writes one PNG and nothing else, and writes it whatever it is given: a cell
or curve whose input is missing is drawn grey or left out and named in the figure, and a
figure with nothing to draw says "not computed" and why, so the report stage always produces
the files it declares. Matplotlib runs on the Agg backend (no display on a cluster node).

Figures stay readable at 20 and more runs: each line has its own colour and line style
(`line_styles`), legends sit beside the axes, never on the data, and a PNG is cut to
its content, so a figure grows with what it shows instead of shrinking its text.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after the backend is chosen
import numpy as np

from maskbench import paths

Cell = tuple[int, float]  # (k, p)


def percent(p: float) -> str:
    """A mask ratio as the paper labels it: 2.25 %, 15 %, 38.7 %."""
    return f"{100 * p:.3g} %"


LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def line_styles(n: int) -> list[dict]:
    """`n` keyword sets for `plot`, each a distinct (colour, line style) pair while n <= 40:
    the ten tab10 colours solid, then dashed, dotted and dash-dotted (matplotlib's own cycle
    repeats its colours after ten, so the 11th run looked like the 1st)."""
    colours = plt.get_cmap("tab10").colors
    return [{"color": colours[i % len(colours)], "linestyle": LINESTYLES[i // len(colours) % len(LINESTYLES)]}
            for i in range(n)]


def legend_beside(ax, handles=None, labels=None) -> None:
    """The axes' legend to their right, outside the data; `_save` widens the PNG to hold it."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0, fontsize="small")


def _save(fig, path: Path) -> None:
    """Lay out, then write the PNG cut to what is drawn: legends and labels outside the axes
    are kept, and empty margins dropped."""
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)


def not_computed(path: Path, title: str, why: str) -> None:
    """A figure that says what it would show and why it cannot yet."""
    fig, ax = plt.subplots(figsize=(6, 2.5))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, f"not computed:\n{why}", ha="center", va="center", wrap=True)
    _save(fig, path)


def heatmap(path: Path, ks: list[int], ps: list[float], values: dict[Cell, float | None], title: str,
            label: str, fmt: str = "{:.1f}", cells: set[Cell] | None = None,
            spreads: dict[Cell, float | None] | None = None) -> None:
    """The (k, p) grid of ExLM Fig. 3-5: k down, p across, each cell's number written on it
    with its spread under it ("72.1" over "±1.3", `spreads`: the seeds' std, so that a reader
    sees which differences are noise); cells outside the grid (`cells`) blank, grid cells
    without a number grey "n/c". `label` names the quantity on the colour bar."""
    spreads = spreads or {}
    grid = np.full((len(ks), len(ps)), np.nan)
    for (k, p), value in values.items():
        if value is not None and k in ks and p in ps:
            grid[ks.index(k), ps.index(p)] = value
    fig, ax = plt.subplots(figsize=(1.3 * len(ps) + 2, (1.0 if spreads else 0.8) * len(ks) + 1.6))
    shown = np.ma.masked_invalid(grid)
    image = ax.imshow(shown, cmap="viridis", aspect="auto")
    ax.set_facecolor("white")
    for i, k in enumerate(ks):
        for j, p in enumerate(ps):
            if cells is not None and (k, p) not in cells:
                continue
            if np.isnan(grid[i, j]):
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, color="0.85"))
                ax.text(j, i, "n/c", ha="center", va="center", color="0.3")
            else:
                light = image.norm(grid[i, j]) > 0.6
                spread = finite(spreads.get((k, p)))
                text = fmt.format(grid[i, j]) + ("" if spread is None else "\n±" + fmt.format(spread))
                ax.text(j, i, text, ha="center", va="center", color="black" if light else "white")
    ax.set_xticks(range(len(ps)), [percent(p) for p in ps])
    ax.set_yticks(range(len(ks)), [str(k) for k in ks])
    ax.set_xlabel("mask ratio p")
    ax.set_ylabel("copies k")
    ax.set_title(title)
    if shown.count():
        fig.colorbar(image, ax=ax, label=label)
    _save(fig, path)


def lines(path: Path, series: dict[str, list[tuple[float, float]]], title: str, xlabel: str, ylabel: str,
          xticks: list[tuple[float, str]] | None = None, missing: list[str] = ()) -> None:
    """One line with markers per series of (x, y) points; `missing` series are named below."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for (name, points), style in zip(series.items(), line_styles(len(series))):
        if points:
            xs, ys = zip(*sorted(points))
            ax.plot(xs, ys, marker="o", label=name, **style)
    if xticks:
        ax.set_xticks([x for x, _ in xticks], [t for _, t in xticks])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    legend_beside(ax)
    ax.grid(alpha=0.3)
    if missing:
        fig.text(0.01, 0.01, "not computed: " + ", ".join(missing), fontsize="small", color="0.3")
    _save(fig, path)


def _read_curve(path: Path, column: str) -> list[tuple[float, float]]:
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return [(float(row["step"]), float(row[column])) for row in csv.DictReader(fh) if row.get(column)]


def training_curves(path: Path, root: Path, runs: dict[str, str], unigram: dict[str, float] | None = None,
                    floors: dict[str, float] | None = None, floor_shown: float = 0.0) -> None:
    """Training loss (log.csv) and validation loss (valid.csv) against the step, one row of
    two panels per modality (`runs`: run -> modality; text's ~7 nats and SMILES' ~2 do not
    share an axis), one line per run in the same style in both panels (styles distinct within
    a row), and on the validation panel a dashed line at the modality's unigram loss
    (`unigram`: modality -> nats); each row's legend beside it; a run without its logs is
    named as not computed. Only the validation panel compares objectives: each training loss
    is its objective's own (ExLM's divides by every expanded token, ends included), so its
    panel shows how each run descends, not which is lower. A run whose validation loss carries
    a cost no prediction lowers (`floors`: run -> `valid_loss_floor`, the uniform DAG's
    transitions) above `floor_shown` nats gets its own plateau, the unigram loss plus that
    floor, dotted in its style: the line it must get below, which the unigram line is not."""
    modalities = list(dict.fromkeys(runs.values()))
    if not modalities:
        not_computed(path, "training curves", "the table has no pretrained run")
        return
    fig, axes = plt.subplots(len(modalities), 2, figsize=(11, 3.8 * len(modalities)), squeeze=False)
    missing = []
    for (train_ax, valid_ax), modality in zip(axes, modalities):
        if modality in (unigram or {}):
            valid_ax.axhline(unigram[modality], color="0.3", linestyle="--", linewidth=1,
                             label=f"unigram loss ({modality})")
        members = [r for r, m in runs.items() if m == modality]
        for run, style in zip(members, line_styles(len(members))):
            train = _read_curve(root / paths.PRETRAIN_LOG.format(run=run), "loss")
            valid = _read_curve(root / paths.PRETRAIN_VALID.format(run=run), "valid_loss")
            if not train and not valid:
                missing.append(run)
            if train:
                train_ax.plot(*zip(*train), label=run, linewidth=1, **style)
            if valid:
                valid_ax.plot(*zip(*valid), label=run, marker=".", **style)
            floor = (floors or {}).get(run, 0.0)
            if floor > floor_shown and modality in (unigram or {}):
                valid_ax.axhline(unigram[modality] + floor, color=style["color"], linestyle=":", linewidth=1,
                                 label=f"{run}: unigram loss + transition floor {floor:.2f}")
        for ax, what, unit in ((train_ax, "training loss (log.csv)", "nats (each objective's own loss)"),
                               (valid_ax, "validation loss (valid.csv)", "nats per predicted token")):
            ax.set_xlabel("step")
            ax.set_ylabel(unit)
            ax.set_title(f"{modality}: {what}")
            ax.grid(alpha=0.3)
        # one legend per row: every run drawn in either panel, once
        handles = {}
        for ax in (valid_ax, train_ax):
            for handle, label in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(label, handle)
        legend_beside(valid_ax, list(handles.values()), list(handles))
    if missing:
        fig.text(0.01, 0, "not computed (no log): " + ", ".join(missing), fontsize="small", color="0.3", va="top")
    _save(fig, path)


def rank_by_layer(path: Path, panels: dict[str, dict[str, list[tuple[int, int]]]], ylabel: str) -> None:
    """Effective rank against the layer (MAE-LM Fig. 1, 5): one panel per entry of `panels`,
    stacked, so each has room for its legend beside it; one line per curve in it; an empty
    panel says "not computed"."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(7.5, 3.4 * len(panels)), squeeze=False)
    for ax, (title, curves) in zip(axes[:, 0], panels.items()):
        drawn = {name: points for name, points in curves.items() if points}
        # runs of equal rank draw on one another: each its own marker, drawn smaller than the
        # one before, so that every line stays visible where several coincide
        for i, ((name, points), style) in enumerate(zip(drawn.items(), line_styles(len(drawn)))):
            ax.plot(*zip(*sorted(points)), marker=MARKERS[i % len(MARKERS)], markersize=max(9 - i, 3),
                    markerfacecolor="none", label=name, **style)
        if not drawn:
            ax.text(0.5, 0.5, "not computed", ha="center", va="center", transform=ax.transAxes)
        legend_beside(ax)
        for axis in (ax.xaxis, ax.yaxis):  # layers and ranks are whole numbers
            axis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    _save(fig, path)


CASE_CELL = 0.34  # inches per state in the case study: room for a probability in small type
CASE_FONT = 8     # points; a character is about 0.6 of that wide


def case_study(path: Path, case: dict, title: str) -> None:
    """ExLM Fig. 10: the transition matrix over the expanded states as a heatmap, each state
    labelled by the input token it was expanded from ([CLS], [MASK] or [SEP]) with that token's
    position and the state's clone index (both axes), and by its top-3 tokens (rows); the
    best path outlined. The figure is sized from its content (cells of `CASE_CELL` inches,
    margins from the longest label) so its text stays legible at any k; cells that are no edge
    of the DAG (to the state itself or backwards, all 0) are left white, and thin lines part
    the states of different input tokens."""
    states, matrix = case["states"], np.asarray(case["transitions"], dtype=float)
    n = len(states)
    names = [f"{case['tokens'][s['masked_index']]}@{s['masked_index']}.{s['clone']}" for s in states]
    rows = [f"{name}: " + "  ".join(f"{t} {p:.2f}" for t, p in s["top3"]) for name, s in zip(names, states)]
    char = 0.6 * CASE_FONT / 72
    width = CASE_CELL * n + char * max(map(len, rows), default=0) + 1.6
    height = CASE_CELL * n + char * max(map(len, names), default=0) + 1.4
    fig, ax = plt.subplots(figsize=(max(width, 5.0), max(height, 3.0)))
    no_edge = np.tril(np.ones_like(matrix, dtype=bool)) & (matrix == 0)
    vmax = max(1e-9, float(np.nanmax(matrix))) if matrix.size else 1
    image = ax.imshow(np.ma.masked_array(matrix, no_edge), cmap="magma_r", vmin=0, vmax=vmax)
    ax.set_xticks(range(n), names, rotation=90, fontsize=CASE_FONT)
    ax.set_yticks(range(n), rows, fontsize=CASE_FONT, family="monospace")
    for i in range(1, n):  # a new input token starts a new block of states
        if states[i]["masked_index"] != states[i - 1]["masked_index"]:
            ax.axhline(i - 0.5, color="0.6", linewidth=0.6)
            ax.axvline(i - 0.5, color="0.6", linewidth=0.6)
    # the DAG's path starts at the first state and ends at the last; best_path lists the states
    # that emit the masked tokens in between
    path_ = [0, *case.get("best_path", []), n - 1] if states else []
    for a, b in zip(path_, path_[1:]):
        ax.add_patch(plt.Rectangle((b - 0.5, a - 0.5), 1, 1, fill=False, edgecolor="tab:cyan", linewidth=2))
        ax.text(b, a, f"{matrix[a, b]:.2f}", ha="center", va="center", fontsize=CASE_FONT - 1,
                color="white" if matrix[a, b] > 0.6 * vmax else "black")
    ax.set_xlabel("to state (input token @ position . clone)")
    ax.set_ylabel("from state, with its top-3 tokens")
    decoded = " ".join(case.get("decoded", []))
    ax.set_title(f"{title}\ninput: {case['text']}" + (f"\nbest path (outlined) decodes: {decoded}" if decoded else ""),
                 fontsize="medium", loc="left")
    fig.colorbar(image, ax=ax, label="transition probability", shrink=min(1.0, 4 / max(CASE_CELL * n, 1e-9)))
    _save(fig, path)


def finite(value) -> float | None:
    """A JSON number as a float, None when missing or undefined."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
