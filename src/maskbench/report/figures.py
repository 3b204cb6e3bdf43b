"""The report tables' figures: one PNG per picture a paper draws, from the same numbers the
table prints (ExLM Fig. 3-5, 10, 12; MAE-LM Fig. 1, 5; training curves of a table's runs).

Every function writes one PNG and nothing else, and writes it whatever it is given: a cell
or curve whose input is missing is drawn grey or left out and named in the figure, and a
figure with nothing to draw says "not computed" and why, so the report stage always produces
the files it declares. Matplotlib runs on the Agg backend (no display on a cluster node).
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


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def not_computed(path: Path, title: str, why: str) -> None:
    """A figure that says what it would show and why it cannot yet."""
    fig, ax = plt.subplots(figsize=(6, 2.5))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, f"not computed:\n{why}", ha="center", va="center", wrap=True)
    _save(fig, path)


def heatmap(path: Path, ks: list[int], ps: list[float], values: dict[Cell, float | None], title: str,
            label: str, fmt: str = "{:.1f}", cells: set[Cell] | None = None) -> None:
    """The (k, p) grid of ExLM Fig. 3-5: k down, p across, each cell's number written on it;
    cells outside the grid (`cells`) blank, grid cells without a number grey "n/c"."""
    grid = np.full((len(ks), len(ps)), np.nan)
    for (k, p), value in values.items():
        if value is not None and k in ks and p in ps:
            grid[ks.index(k), ps.index(p)] = value
    fig, ax = plt.subplots(figsize=(1.3 * len(ps) + 2, 0.8 * len(ks) + 1.6))
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
                ax.text(j, i, fmt.format(grid[i, j]), ha="center", va="center", color="black" if light else "white")
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
    for name, points in series.items():
        if points:
            xs, ys = zip(*sorted(points))
            ax.plot(xs, ys, marker="o", label=name)
    if xticks:
        ax.set_xticks([x for x, _ in xticks], [t for _, t in xticks])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if any(series.values()):
        ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    if missing:
        fig.text(0.01, 0.01, "not computed: " + ", ".join(missing), fontsize="small", color="0.3")
    _save(fig, path)


def _read_curve(path: Path, column: str) -> list[tuple[float, float]]:
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return [(float(row["step"]), float(row[column])) for row in csv.DictReader(fh) if row.get(column)]


def training_curves(path: Path, root: Path, runs: list[str], unigram: dict[str, float] | None = None) -> None:
    """Training loss (log.csv) and validation loss (valid.csv) against the step, one line per
    run, in two panels, and on the validation panel a dashed line at each modality's unigram
    loss (`unigram`: modality -> nats); a run without its logs is named as not computed."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for (modality, loss), style in zip(sorted((unigram or {}).items()), ("--", ":", "-.")):
        axes[1].axhline(loss, color="0.4", linestyle=style, linewidth=1, label=f"unigram loss ({modality})")
    missing = []
    for run in runs:
        train = _read_curve(root / paths.PRETRAIN_LOG.format(run=run), "loss")
        valid = _read_curve(root / paths.PRETRAIN_VALID.format(run=run), "valid_loss")
        if not train and not valid:
            missing.append(run)
        for ax, points in zip(axes, (train, valid)):
            if points:
                ax.plot(*zip(*points), label=run, marker="." if ax is axes[1] else None)
    for ax, what in zip(axes, ("training loss (log.csv)", "validation loss (valid.csv)")):
        ax.set_xlabel("step")
        ax.set_ylabel("nats per predicted token")
        ax.set_title(what)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="x-small", ncol=2)
    if missing:
        fig.text(0.01, 0.01, "not computed (no log): " + ", ".join(missing), fontsize="small", color="0.3")
    _save(fig, path)


def rank_by_layer(path: Path, panels: dict[str, dict[str, list[tuple[int, int]]]], ylabel: str) -> None:
    """Effective rank against the layer (MAE-LM Fig. 1, 5): one panel per entry of `panels`,
    one line per curve in it; an empty panel says "not computed"."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 4.2), squeeze=False)
    for ax, (title, curves) in zip(axes[0], panels.items()):
        drawn = {name: points for name, points in curves.items() if points}
        for name, points in drawn.items():
            ax.plot(*zip(*sorted(points)), marker="o", label=name)
        if not drawn:
            ax.text(0.5, 0.5, "not computed", ha="center", va="center", transform=ax.transAxes)
        else:
            ax.legend(fontsize="small")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    _save(fig, path)


def case_study(path: Path, case: dict, title: str) -> None:
    """ExLM Fig. 10: the transition matrix over the expanded states as a heatmap, each state
    labelled by the input token it was expanded from ([CLS], [MASK] or [SEP]) with that token's
    position and the state's clone index, and by its top-3 tokens; the best path outlined."""
    states, matrix = case["states"], np.asarray(case["transitions"], dtype=float)
    labels = [f"{case['tokens'][s['masked_index']]}@{s['masked_index']}.{s['clone']}: "
              + " ".join(f"{t} {p:.2f}" for t, p in s["top3"]) for s in states]
    size = max(4.0, 0.55 * len(states) + 3)
    fig, ax = plt.subplots(figsize=(size + 3, size))
    image = ax.imshow(matrix, cmap="magma", vmin=0, vmax=max(1e-9, float(np.nanmax(matrix))) if matrix.size else 1)
    ax.set_xticks(range(len(states)), labels, rotation=60, ha="right", fontsize="small")
    ax.set_yticks(range(len(states)), labels, fontsize="small")
    # the DAG's path starts at the first state and ends at the last; best_path lists the states
    # that emit the masked tokens in between
    path_ = [0, *case.get("best_path", []), len(states) - 1] if states else []
    for a, b in zip(path_, path_[1:]):
        ax.add_patch(plt.Rectangle((b - 0.5, a - 0.5), 1, 1, fill=False, edgecolor="cyan", linewidth=2))
    ax.set_xlabel("to state")
    ax.set_ylabel("from state")
    decoded = " ".join(case.get("decoded", []))
    ax.set_title(f"{title}\n{case['text']}\nbest path decodes: {decoded}" if decoded else f"{title}\n{case['text']}",
                 fontsize="small")
    fig.colorbar(image, ax=ax, label="transition probability")
    _save(fig, path)


def finite(value) -> float | None:
    """A JSON number as a float, None when missing or undefined."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
