"""The report's figures stay readable at 20 runs (maskbench.report.figures): every run its own
(colour, line style), legends beside the axes and never on the data, one row of
training panels per modality, score heatmaps that name the metric as a reader knows it and
show the seeds' spread, and a DAG case study sized to its states. Figures are captured
before they are written (`_save` patched to lay them out and keep them), so the tests read
the drawn artists, not pixels."""

from __future__ import annotations

import matplotlib.colors
import pytest

from maskbench import paths
from maskbench.config import grid_arms, grid_cell, read_yaml, schema_path, validate
from maskbench.eval.metrics import KIND_METRICS, LABELS, METRICS, metric_label
from maskbench.report import figures, repeated_mlm_grid
from maskbench.report.cells import read_summaries
from maskbench.report.missing import Missing
from tests.helpers import write_summary

TAB10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


@pytest.fixture
def drawn(monkeypatch) -> dict:
    """Figure file name -> the figure, laid out as `_save` lays it out, instead of a PNG."""
    found = {}

    def keep(fig, path):
        fig.tight_layout()
        fig.canvas.draw()
        found[path.name] = fig

    monkeypatch.setattr(figures, "_save", keep)
    return found


def write_curves(root, run, losses):
    """A run's log.csv and valid.csv, the losses at steps 100, 200, ..."""
    for pattern, column in ((paths.PRETRAIN_LOG, "loss"), (paths.PRETRAIN_VALID, "valid_loss")):
        path = root / pattern.format(run=run)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"step,{column}\n" + "".join(f"{100 * (i + 1)},{v}\n" for i, v in enumerate(losses)))


def style(line) -> tuple[str, str]:
    return matplotlib.colors.to_hex(line.get_color()), line.get_linestyle()


def outside(fig, ax) -> bool:
    """Whether the axes' legend lies right of their data area and off every other panel of
    the drawn figure."""
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    panels = [other.get_window_extent(renderer) for other in fig.axes]
    return legend.x0 >= ax.get_window_extent(renderer).x1 and not any(legend.overlaps(box) for box in panels)


def test_line_styles_are_tab10_solid_then_dashed():
    styles = [(matplotlib.colors.to_hex(s["color"]), s["linestyle"]) for s in figures.line_styles(40)]
    assert styles[:10] == [(c, "-") for c in TAB10]
    assert styles[10:13] == [(TAB10[0], "--"), (TAB10[1], "--"), (TAB10[2], "--")]
    assert styles[30] == (TAB10[0], "-.") and len(set(styles)) == 40


def test_twenty_runs_get_twenty_distinct_styles_the_same_in_both_panels(tmp_path, drawn):
    runs = {f"run{i}": "smiles" for i in range(20)}
    for i, run in enumerate(runs):
        write_curves(tmp_path, run, [2.0 - 0.01 * i, 1.5 - 0.01 * i])
    figures.training_curves(tmp_path / "training.png", tmp_path, runs, {"smiles": 2.3})
    train_ax, valid_ax = drawn["training.png"].axes
    train = {line.get_label(): style(line) for line in train_ax.lines}
    valid = {line.get_label(): style(line) for line in valid_ax.lines if line.get_label() in runs}
    assert train.keys() == runs.keys() and len(set(train.values())) == 20
    assert valid == train  # a run is recognisable from one panel to the other


def test_one_row_per_modality_each_with_its_own_unigram_line(tmp_path, drawn):
    """Text (~7 nats) and SMILES (~2 nats) no longer share an axis: a row of two panels each,
    the validation panel with its modality's unigram loss only; a run without logs is named."""
    runs = {"mlm": "text", "exlm": "text", "smiles_mlm": "smiles", "smiles_lost": "smiles"}
    write_curves(tmp_path, "mlm", [7.5, 6.0])
    write_curves(tmp_path, "exlm", [7.4, 5.8])
    write_curves(tmp_path, "smiles_mlm", [2.5, 1.2])
    figures.training_curves(tmp_path / "training.png", tmp_path, runs, {"text": 6.95, "smiles": 2.30})
    fig = drawn["training.png"]
    assert [ax.get_title() for ax in fig.axes] == [
        "text: training loss (log.csv)", "text: validation loss (valid.csv)",
        "smiles: training loss (log.csv)", "smiles: validation loss (valid.csv)"]
    text_valid, smiles_valid = fig.axes[1], fig.axes[3]
    assert {line.get_label(): line.get_ydata()[0] for line in text_valid.lines} == {
        "unigram loss (text)": 6.95, "mlm": 7.5, "exlm": 7.4}
    assert {line.get_label(): line.get_ydata()[0] for line in smiles_valid.lines} == {
        "unigram loss (smiles)": 2.30, "smiles_mlm": 2.5}
    assert smiles_valid.get_ylim()[1] < 3  # its own scale, not text's
    assert any("not computed (no log): smiles_lost" in t.get_text() for t in fig.texts)


def test_a_run_with_a_transition_floor_gets_its_own_plateau_line_in_its_colour(tmp_path, drawn):
    """The uniform DAG's validation loss carries 1.2 nats no prediction lowers: the unigram line
    is not its plateau, so it gets the unigram loss plus its floor, dotted in its colour; a
    learned DAG's few hundredths (under `floor_shown`) draw nothing."""
    runs = {"smiles_exlm_no_transitions": "smiles", "smiles_exlm": "smiles", "smiles_mlm": "smiles"}
    for run in runs:
        write_curves(tmp_path, run, [3.5, 3.1])
    figures.training_curves(tmp_path / "training.png", tmp_path, runs, {"smiles": 2.3},
                            floors={"smiles_exlm_no_transitions": 1.21, "smiles_exlm": 0.02}, floor_shown=0.1)
    valid_ax = drawn["training.png"].axes[1]
    lines = {line.get_label(): line for line in valid_ax.lines}
    plateau = lines["smiles_exlm_no_transitions: unigram loss + transition floor 1.21"]
    assert plateau.get_ydata()[0] == pytest.approx(3.51) and plateau.get_linestyle() == ":"
    assert plateau.get_color() == lines["smiles_exlm_no_transitions"].get_color()
    assert not any("smiles_exlm:" in label for label in lines)


def test_legends_lie_outside_the_data(tmp_path, drawn):
    runs = {f"run{i}": "text" for i in range(12)}
    for run in runs:
        write_curves(tmp_path, run, [7.0, 6.0, 5.5])
    figures.training_curves(tmp_path / "training.png", tmp_path, runs, {"text": 6.95})
    fig = drawn["training.png"]
    assert outside(fig, fig.axes[1])
    assert [text.get_text() for text in fig.axes[1].get_legend().get_texts()] == ["unigram loss (text)", *runs]

    curves = {f"run{i}: with [MASK]": [(layer, 10 + layer + i) for layer in range(5)] for i in range(6)}
    figures.rank_by_layer(tmp_path / "rank.png", {"one": curves, "two": curves, "three": {}}, "rank")
    fig = drawn["rank.png"]
    assert outside(fig, fig.axes[0]) and outside(fig, fig.axes[1]) and fig.axes[2].get_legend() is None
    # ranks and layers are whole numbers: no tick at 9.25; equal curves stay told apart by marker
    ticks = [t for axis in (fig.axes[0].xaxis, fig.axes[0].yaxis) for t in axis.get_majorticklocs()]
    assert ticks and all(float(t).is_integer() for t in ticks)
    lines = fig.axes[0].get_lines()
    assert len({(line.get_marker(), line.get_color(), line.get_linestyle()) for line in lines}) == len(lines) == 6
    assert len({line.get_marker() for line in lines}) == 6
    figures.rank_by_layer(tmp_path / "rank.png", {"close": {"a": [(0, 9), (1, 10)], "b": [(0, 9), (1, 9)]}}, "rank")
    assert all(float(t).is_integer() for t in drawn["rank.png"].axes[0].yaxis.get_majorticklocs())

    figures.lines(tmp_path / "entropy.png", {"MLM": [(15, 1.0), (40, 2.0)], "ExLM k = 2": [(15, 1.5)]}, "t", "x", "y")
    fig = drawn["entropy.png"]
    assert outside(fig, fig.axes[0])


def test_every_metric_has_a_label():
    recorded = {name for names in KIND_METRICS.values() for name in names}
    assert (set(METRICS) | recorded) <= LABELS.keys()
    assert metric_label("roc_auc") == "ROC-AUC" and metric_label("matthews_corr") == "Matthews correlation"


def test_score_heatmap_names_the_metric_and_shows_the_seed_spread(tmp_path, raw_params, drawn):
    """table2's BBBP heatmap: titled and coloured by "ROC-AUC (%)", not `roc_auc`, and each
    cell's score over its seeds' std ("72.1" over "±1.3")."""
    config = validate(raw_params, read_yaml(schema_path()))
    runs = {grid_cell(config["runs"][r]): r for r in grid_arms(config, "table2")}
    write_summary(tmp_path, runs[2, 0.15], "bbbp", {
        "value": 0.721, "std": 0.013, "aggregate": "mean", "seeds_expected": 3, "seeds_missing": [],
        "metric": "roc_auc", "split": "test"})
    cells = repeated_mlm_grid.layout(config, "table2")
    unmeasured = {run: {"corruption": Missing("not computed"), "entropy": Missing("not computed")} for _, run in cells}
    repeated_mlm_grid.draw_figures(config, "table2", tmp_path, tmp_path, cells,
                                 read_summaries(config, tmp_path, [(runs[2, 0.15], "bbbp")]), unmeasured)
    fig = drawn["score-bbbp.png"]
    ax, colorbar = fig.axes
    assert ax.get_title() == f"{config['tasks']['bbbp']['label']}: ROC-AUC (%), ± std of 3 fine-tuning seeds"
    assert colorbar.get_ylabel() == "ROC-AUC (%)"
    texts = [t.get_text() for t in ax.texts]
    assert "72.1\n±1.3" in texts and texts.count("n/c") == len(cells) - 1


def test_case_study_cells_keep_their_size_as_states_grow(tmp_path, drawn):
    """The DAG figure is sized to its states: a cell is about `CASE_CELL` inches at 8 states
    and at 32, so its labels stay legible instead of shrinking into a fixed canvas; columns are
    named by state alone (the top-3 tokens label the rows)."""
    for n in (8, 32):
        states = [{"masked_index": 2 * (i // 4), "clone": i % 4 + 1, "top3": [["good", 0.4], ["bad", 0.2], ["a", 0.1]]}
                  for i in range(n)]
        case = {"states": states, "transitions": [[0.5 if j == i + 1 else 0.0 for j in range(n)] for i in range(n)],
                "tokens": ["[CLS]", "x", "[MASK]", "y"] * 20, "best_path": [2], "decoded": ["good"],
                "text": "x [MASK] y"}
        figures.case_study(tmp_path / f"case{n}.png", case, "case study")
        fig = drawn[f"case{n}.png"]
        ax = fig.axes[0]
        box = ax.get_position()
        cell = box.height * fig.get_size_inches()[1] / n
        assert 0.8 * figures.CASE_CELL <= cell <= 1.2 * figures.CASE_CELL, (n, cell)
        assert ax.get_xticklabels()[0].get_text() == "[CLS]@0.1"
        assert ax.get_yticklabels()[0].get_text() == "[CLS]@0.1: good 0.40  bad 0.20  a 0.10"
