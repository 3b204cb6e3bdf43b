"""The report's tables (`maskbench.report.cells`, table1's `maskbench.report.objectives`): cells
show the spread and the seeds missing, undefined scores are explained, MNLI's matched/mismatched
and `also_report` metrics sit beside the headline, headers name the aggregate, `render` reads the
summaries, and every row stands beside its controls: the `none` run, the baselines, the probe of
its own encoder, its position scheme. Every table is written by `maskbench.report.markdown`."""

from __future__ import annotations

import math
import re

import json

import numpy as np
import pytest

from maskbench import paths
from maskbench.report import markdown
from maskbench.report.cells import BELOW_PROBE, DID_NOT_LEARN_MARK, LEARNING, cell, column_header, controlled_cell
from maskbench.report.missing import Missing
from maskbench.report.objectives import render
from maskbench.report.table import learned_mark
from maskbench.eval.verdict import A_BETTER, B_BETTER, UNDECIDED, Comparison
from tests.helpers import REPO, config_with_profile, validated, write_summary


def summary(value, std=0.0, aggregate="median", missing=(), metric="accuracy"):
    return {"value": value, "std": std, "aggregate": aggregate, "seeds_expected": 3, "seeds_missing": list(missing),
            "metric": metric, "split": "test"}


def test_cells_show_the_spread_and_say_what_was_not_computed():
    assert cell(None, True) == "not computed"
    assert cell(summary(0.5), False) == "—"
    assert cell(summary(0.9, 0.012), True) == "90.0 ± 1.2"
    assert cell(summary(0.9, 0.1, "mean"), True) == "90.0 ± 10.0"
    assert cell(summary(0.9, missing=[3]), True) == "90.0 ± 0.0 (2/3 seeds)"
    assert cell(summary(0.512, 0.01, "mean", metric="rmse"), True) == "0.512 ± 0.010"


def test_a_markdown_table_is_its_header_a_separator_and_its_rows():
    assert markdown.table(["run", "score"], [["mlm", "90.0 ± 1.2"], ["none", ""]]) == [
        "| run | score |", "|---|---|", "| mlm | 90.0 ± 1.2 |", "| none |  |"]


def test_a_row_narrower_than_the_header_is_refused_not_shifted():
    """The [UNK] row once had a cell too few and markdown moved every share one column left."""
    with pytest.raises(ValueError, match=r"a table row has 2 cells for 3 columns \('run' \.\.\.\): \['mlm', '90'\]"):
        markdown.table(["run", "score", "pretraining"], [["mlm", "90"]])


def test_undefined_scores_are_explained_not_shown_as_nan():
    roc = summary(math.nan, math.nan, "mean", metric="roc_auc")
    assert cell(roc, True) == "not computed (no task has both classes on test)"
    assert cell(summary(math.nan, metric="pearson"), True) == "not computed (pearson is undefined (NaN) on test)"


def test_mnli_cells_show_matched_then_mismatched(raw_params):
    mnli = {**summary(0.842), "split": "dev", "extra": {"dev_mismatched": {"value": 0.845, "std": 0.0}}}
    assert cell(mnli, True) == "84.2 ± 0.0 / 84.5 ± 0.0"
    raw_params["profile"] = "paper"
    config = validated(raw_params)
    assert (column_header(config, "mnli", mnli)
            == "MNLI-m/mm (GLUE) — accuracy (%), dev / dev mismatched, median ± std of 5 seeds")


def test_also_report_metrics_follow_the_headline(raw_params):
    squad = {**summary(0.815, 0.003, metric="squad_v2_f1"), "split": "dev",
             "also_report": {"squad_v2_exact": {"value": 0.783, "std": 0.004, "extra": {}}}}
    assert cell(squad, True) == "81.5 ± 0.3 / 78.3 ± 0.4"
    raw_params["profile"] = "paper"
    raw_params["profiles"]["paper"]["tasks"]["squad_v2"]["also_report"] = ["squad_v2_exact"]
    config = validated(raw_params)
    assert (column_header(config, "squad_v2", squad)
            == "SQuAD 2.0 — F1 / EM (%), dev, median ± std of 5 seeds")


def test_header_names_the_tasks_aggregate(raw_params):
    raw_params["tasks"]["rotten_tomatoes"]["aggregate"] = "mean"
    config = validated(raw_params)
    assert column_header(config, "rotten_tomatoes", None).endswith("accuracy (%), ?, mean ± std of 3 seeds")


# table1 as these tests lay it out (a text classification, a text regression, a MoleculeNet
# classification and regression task), whatever tasks the default profile picks
TABLE1_TASKS = ["rotten_tomatoes", "vader_movies", "bbbp", "esol"]


def test_render_reads_summaries(tmp_path, raw_params):
    raw_params["tables"]["table1"]["tasks"] = TABLE1_TASKS
    config = validated(raw_params)
    write_summary(tmp_path, "mlm", "rotten_tomatoes", summary(0.8, 0.02))
    text = render(config, "table1", tmp_path).markdown
    assert "| mlm | mlm | p = 15 % | rope | 80.0 ± 2.0 (probe not computed) |" in text
    # every run row names its objective's knobs (defaults included) and its position scheme
    assert ("| smiles_exlm | exlm | k = 2; p = 15 %; 2-D RoPE; dense DAG; transitions from detached states + slot "
            "embedding | rope2d | — |") in text
    assert "| exlm | exlm | k = 2; p = 15 %; 2-D RoPE; sparse DAG; " in text   # the text variant reads as one
    assert "| control: no pretraining (`none`) | none | — | rope | not computed (probe not computed) |" in text
    assert ("Rotten Tomatoes (sentiment; SST-2 stand-in) — accuracy (%), test, median ± std of 3 seeds" in text
            and "params hash" in text)
    assert "How a claim is decided: 2000 bootstrap resamples" in text


def test_table_shows_each_smiles_tasks_unknown_share_from_its_card(tmp_path, raw_params):
    raw_params["tables"]["table1"]["tasks"] = TABLE1_TASKS
    config = validated(raw_params)
    write_json(tmp_path / paths.TASK_CARD.format(task="bbbp"),
               {"unknown_tokens": {s: {"rate": r} for s, r in (("train", 0.0), ("dev", 0.0012), ("test", 0.0405))}})
    write_json(tmp_path / paths.TASK_CARD.format(task="rotten_tomatoes"), {"unknown_tokens": {"train": {"rate": 0.5}}})
    text = render(config, "table1", tmp_path).markdown
    # text tasks: "—"; bbbp: its card; esol: no card yet; read under each task's own header
    row = unknown_row_by_column(text)
    assert [row[config["tasks"][t]["label"]] for t in TABLE1_TASKS] == [
        "—", "—", "0.00% / 0.12% / 4.05%", "not computed (no task card)"]
    assert {row["objective"], row["knobs"], row["positions"], row[LEARNING]} == {"—"}


@pytest.mark.parametrize("profile", ["tiny", "smoke"])
def test_table4_shows_every_moleculenet_columns_unknown_share_in_its_column(tmp_path, raw_params, profile):
    """table4 (MoleculeNet per dataset) carries the same row as table1: each column's own card,
    in the column's place; under both CPU profiles BBBP and BACE are among its columns, so their
    share is in a table wherever they are fine-tuned."""
    config = config_with_profile(raw_params, profile)
    tasks = config["tables"]["table4"]["tasks"]
    assert {"bbbp", "bace"} <= set(tasks) and all(config["tasks"][t]["modality"] == "smiles" for t in tasks)
    for i, task in enumerate(tasks):  # a distinct share per column, so a swapped column shows
        write_json(tmp_path / paths.TASK_CARD.format(task=task),
                   {"unknown_tokens": {s: {"rate": (10 * i + j) / 10_000}
                                       for j, s in enumerate(("train", "dev", "test"))}})
    text = render(config, "table4", tmp_path).markdown
    row = unknown_row_by_column(text)
    assert [row[config["tasks"][t]["label"]] for t in tasks] == [
        f"{i / 10:.2f}% / {(10 * i + 1) / 100:.2f}% / {(10 * i + 2) / 100:.2f}%" for i in range(len(tasks))], row


def unknown_row_by_column(text: str) -> dict[str, str]:
    """The [UNK] row's cells keyed by the start of their column's header (a task column by its
    label): a row shifted by one cell reads in the wrong columns and fails."""
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| run |"))
    row = next(line for line in lines if line.startswith("| tokens read as [UNK]"))
    names, cells = ([c.strip() for c in line.strip().strip("|").split("|")] for line in (header, row))
    assert len(names) == len(cells), (header, row)
    return {name.split(" — ")[0]: cell for name, cell in zip(names, cells)}


def test_cells_carry_the_probe_and_the_marks():
    """‡ follows the comparison of the probe (a) with the fine-tuned run, not the centres."""
    assert controlled_cell("70.0", {"value": 0.65}, "accuracy", "B better") == "70.0 (probe 65.0)"
    assert controlled_cell("70.0", {"value": 0.75}, "accuracy", "A better") == f"70.0 (probe 75.0) {BELOW_PROBE}"
    assert controlled_cell("70.0", {"value": 0.71}, "accuracy", "not decided") == "70.0 (probe 71.0)"
    assert controlled_cell("0.900", {"value": 0.8}, "rmse", "A better") == f"0.900 (probe 0.800) {BELOW_PROBE}"
    assert controlled_cell("0.900", {"value": 1.1}, "rmse", "B better") == "0.900 (probe 1.100)"
    assert controlled_cell("50.0", None, "squad_v2_f1", None) == "50.0 (probe —)"  # QA is not probed
    assert controlled_cell("not computed", None, "accuracy", None) == "not computed (probe not computed)"


class Against:
    """A task's evidence whose comparison with the control is `found` (an outcome or Missing)."""

    def __init__(self, found):
        self.found, self.asked = found, []

    def compare_runs(self, run, none):
        self.asked.append((run, none))
        return self.found if isinstance(self.found, Missing) else Comparison(0.0, 0.0, 0.0, self.found, 1000, 0)


def test_one_did_not_learn_mark_for_every_kind():
    """† where the run is not better than its control; never on the control itself, without a
    control, or while the comparison cannot be computed (the cell says what is missing)."""
    assert learned_mark(Against(A_BETTER), "mlm", "none") == ""
    assert learned_mark(Against(UNDECIDED), "mlm", "none") == f" {DID_NOT_LEARN_MARK}"
    assert learned_mark(Against(B_BETTER), "mlm", "none") == f" {DID_NOT_LEARN_MARK}"
    assert learned_mark(Against(Missing("no scores")), "mlm", "none") == ""
    unasked = Against(UNDECIDED)
    assert learned_mark(unasked, "none", "none") == "" and learned_mark(unasked, "mlm", None) == ""
    assert unasked.asked == []


def write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def write_predictions(root, run, task, accuracies, labels):
    """One predictions.jsonl per seed: two-class probabilities right on a fraction of the rows."""
    for seed, accuracy in zip((1, 2, 3), accuracies):
        write_two_class(root / paths.FINETUNE_PREDICTIONS.format(run=run, task=task, seed=seed),
                        np.random.default_rng([seed, *run.encode()]).random(len(labels)) < accuracy, labels)


def write_probe(root, run, task, accuracy, labels):
    """A probe's metrics.json and predictions.jsonl, right on a fraction of the rows."""
    write_json(root / paths.PROBE_METRICS.format(run=run, task=task), {"metric": "accuracy", "value": accuracy})
    write_two_class(root / paths.PROBE_PREDICTIONS.format(run=run, task=task),
                    np.random.default_rng([7, *run.encode()]).random(len(labels)) < accuracy, labels)


def write_two_class(path, right, labels):
    predicted = np.where(right, labels, 1 - labels)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"split": split, "index": i, "prediction": [1.0 - p, float(p)],
                                            "label": int(y)}) + "\n"
                                for split in ("dev", "test") for i, (p, y) in enumerate(zip(predicted, labels))))


def test_controls_rows_probes_and_did_not_learn(tmp_path, raw_params):
    """The `none` control, one row per baseline (— where it does not apply, not computed where
    missing), the probe beside each cell, ‡ where it beats the fine-tuned run beyond the noise
    (not where it is merely above its centre), † where a run is no better than `none`."""
    raw_params["verdicts"]["bootstrap"] = 200
    raw_params["tables"]["table1"]["tasks"] = TABLE1_TASKS
    config = validated(raw_params)
    labels = np.random.default_rng(0).integers(0, 2, 300)
    for run, accuracy in (("none", 0.6), ("mlm", 0.85), ("mae_lm", 0.6), ("exlm", 0.84)):
        write_summary(tmp_path, run, "rotten_tomatoes", summary(accuracy, 0.01))
        write_predictions(tmp_path, run, "rotten_tomatoes", [accuracy] * 3, labels)
    write_probe(tmp_path, "mlm", "rotten_tomatoes", 0.97, labels)   # far above 85 %
    write_probe(tmp_path, "exlm", "rotten_tomatoes", 0.85, labels)  # 84 % fine-tuned: within the noise
    write_json(tmp_path / paths.BASELINE_METRICS.format(task="rotten_tomatoes"), {
        "task": "rotten_tomatoes", "metric": "accuracy", "split": "test",
        "baselines": {"majority": {"label": "majority class", "value": 0.5}}})
    write_json(tmp_path / paths.BASELINE_METRICS.format(task="esol"), {
        "task": "esol", "metric": "rmse", "split": "test",
        "baselines": {"train_mean": {"label": "train mean", "value": 1.234},
                      "ecfp": {"label": "ECFP4 + linear model", "value": 0.9}}})
    text = render(config, "table1", tmp_path).markdown
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert f"85.0 ± 1.0 (probe 97.0) {BELOW_PROBE} |" in rows["mlm"]
    assert "84.0 ± 1.0 (probe 85.0) |" in rows["exlm"] and BELOW_PROBE not in rows["exlm"]
    assert DID_NOT_LEARN_MARK not in rows["mlm"] and DID_NOT_LEARN_MARK not in rows["exlm"]
    assert f"60.0 ± 1.0 (probe not computed) {DID_NOT_LEARN_MARK} |" in rows["mae_lm"]
    # the control is not checked against itself
    assert DID_NOT_LEARN_MARK not in rows["control: no pretraining (`none`)"]
    majority = rows["baseline: majority class"].split(" | ")
    # the other tasks of table1: no baseline file ("not computed"), but ESOL's, which has no majority class ("—")
    others = ["—" if t == "esol" else "not computed" for t in config["tables"]["table1"]["tasks"][1:]]
    assert majority[1:5] == ["—", "—", "—", "50.0"] and " | ".join(majority[5:]) == " | ".join(others) + " | — |"
    assert rows["baseline: train mean"].endswith("| 1.234 | — |") and "not computed" in rows["baseline: train mean"]
    assert "| baseline: ECFP4 + linear model | — | — |" in text


def write_baseline_predictions(root, task, name, predictions, labels):
    path = root / paths.BASELINE_PREDICTIONS.format(task=task)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"baseline": name, "split": split, "index": i, "prediction": p, "label": int(y)})
                            + "\n" for split in ("dev", "test") for i, (p, y) in enumerate(zip(predictions, labels))))


def test_a_task_decides_only_where_a_pretrained_arm_beats_none_and_the_trivial_baseline(tmp_path, raw_params):
    """Rotten Tomatoes decides when `mlm` beats both `none` and the majority class
    beyond the noise; an arm that beats the majority class but not `none` does not make it decide."""
    raw_params["verdicts"]["bootstrap"] = 200
    raw_params["tables"]["table1"]["tasks"] = TABLE1_TASKS
    config = validated(raw_params)
    labels = np.random.default_rng(0).integers(0, 2, 300)
    majority = [[0.0, 1.0]] * len(labels)  # predicts class 1 for every row: about 50 %
    write_baseline_predictions(tmp_path, "rotten_tomatoes", "majority", majority, labels)
    for run, accuracy in (("none", 0.7), ("mlm", 0.9), ("mae_lm", 0.7), ("exlm", 0.7)):
        write_predictions(tmp_path, run, "rotten_tomatoes", [accuracy] * 3, labels)
    line = next(ln for ln in render(config, "table1", tmp_path).markdown.splitlines()
                if ln.startswith("- Rotten Tomatoes"))
    assert "decides: `mlm` beat `none` and the majority baseline" in line
    assert "`mae_lm` not better than `none`" in line and "majority" not in line.split("`mae_lm`")[1].split(";")[0]

    write_predictions(tmp_path, "mlm", "rotten_tomatoes", [0.7] * 3, labels)
    line = next(ln for ln in render(config, "table1", tmp_path).markdown.splitlines()
                if ln.startswith("- Rotten Tomatoes"))
    assert line.startswith("- Rotten Tomatoes") and "does not decide at this scale" in line


def test_training_figure_draws_each_modalitys_unigram_loss(tmp_path, monkeypatch):
    """Each modality's validation panel carries the line its runs must get below to have
    learned more than token frequencies: its unigram loss, read from the runs' metrics.json;
    and a run whose transitions cost more than `verdicts.learned_gap` its own, plus that cost."""
    from maskbench.report import figures
    from maskbench.report.footer import training_figure

    for run, unigram, floor in (("mlm", 6.95, 0.0), ("smiles_mlm", 2.30, 0.0), ("smiles_exlm_none", 2.30, 1.25)):
        out = tmp_path / paths.PRETRAIN_VALID.format(run=run)
        out.parent.mkdir(parents=True)
        out.write_text("step,valid_loss\n100,7.0\n200,6.5\n")
        (tmp_path / paths.PRETRAIN_METRICS.format(run=run)).write_text(
            json.dumps({"unigram_loss": unigram, "valid_loss_floor": floor}))
    config = {"tables": {"t": {"runs": ["mlm", "smiles_mlm", "smiles_exlm_none"]}},
              "runs": {"mlm": {"objective": "mlm", "modality": "text"},
                       "smiles_mlm": {"objective": "mlm", "modality": "smiles"},
                       "smiles_exlm_none": {"objective": "exlm", "modality": "smiles"}},
              "verdicts": {"learned_gap": 0.1}}
    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda fig, path: drawn.update(fig=fig))
    training_figure(config, "t", tmp_path, tmp_path)
    text, smiles = ({line.get_label(): line.get_ydata()[0] for line in drawn["fig"].axes[i].lines} for i in (1, 3))
    assert text == {"unigram loss (text)": 6.95, "mlm": 7.0}
    assert smiles == {"unigram loss (smiles)": 2.30, "smiles_mlm": 7.0, "smiles_exlm_none": 7.0,
                      "smiles_exlm_none: unigram loss + transition floor 1.25": 3.55}


def test_every_row_says_whether_its_encoder_left_the_unigram_plateau(tmp_path, raw_params):
    """The last column: the pretraining validation loss's gap to the unigram loss, "(plateau)"
    under `verdicts.learned_gap`, the untrained control's own gap, ExLM's with its DAG's transition
    floor added back, and "not computed" (naming the file) where a run's metrics are missing;
    baselines have no encoder."""
    raw_params["tables"]["table1"]["tasks"] = TABLE1_TASKS
    config = validated(raw_params)
    threshold = config["verdicts"]["learned_gap"]
    for run, gap in (("none", -1.0), ("mlm", 0.8), ("mae_lm", threshold - 0.01)):
        write_json(tmp_path / paths.PRETRAIN_METRICS.format(run=run),
                   {"unigram_loss": 7.0, "unigram_gap": gap, "valid_loss_floor": 0.0})
    # a DAG whose transitions alone cost 1.2 nats: read against the unigram loss plus them
    write_json(tmp_path / paths.PRETRAIN_METRICS.format(run="smiles_exlm"),
               {"unigram_loss": 2.3, "unigram_gap": -0.8, "valid_loss_floor": 1.2})
    text = render(config, "table1", tmp_path).markdown
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["run"].endswith(f"| {LEARNING} |")
    assert rows["mlm"].endswith("| 0.80 |")
    assert rows["mae_lm"].endswith(f"| {threshold - 0.01:.2f} (plateau) |")
    assert rows["control: no pretraining (`none`)"].endswith("| -1.00 (untrained) |")
    assert rows["smiles_exlm"].endswith("| 0.40 |")
    assert rows["exlm"].endswith(f"| not computed (no {paths.PRETRAIN_METRICS.format(run='exlm')}) |")
    assert all(line.endswith("| — |") for name, line in rows.items() if name.startswith(("baseline", "published")))
    assert "(plateau)" in text.split("Claims of the papers")[0].split("|")[-1]  # the note says what the column means


def test_every_column_header_names_its_metrics_as_the_papers_do(raw_params):
    """No raw metric key (`roc_auc`, `squad_v2_f1`) nor split key (`dev_mismatched`) in any task's
    column header, on every profile; and prose lists names, not Python lists."""
    from maskbench.eval.metrics import METRICS, metric_label
    from maskbench.report.markdown import names

    for profile in raw_params["profiles"]:
        config = validated({**raw_params, "profile": profile})
        for task in config["tasks"]:
            header = column_header(config, task, None)
            raw = [key for key in METRICS if metric_label(key) != key and re.search(rf"\b{key}\b", header)]
            assert not raw, (profile, header)
    mnli = {**summary(0.842), "split": "dev", "extra": {"dev_mismatched": {"value": 0.845, "std": 0.0}}}
    assert "_" not in column_header(config, "mnli", mnli).split(" — ")[1]
    assert names(["mlm"]) == "`mlm`" and names([]) == "none" and names(["a", "b"]) == "`a`, `b`"


def test_every_kind_the_schema_allows_has_a_card_that_names_it_in_words():
    """The schema's `kind` enum and the cards (maskbench.report.kinds) list the same kinds, each
    card in the module named after it, its label prose (no key)."""
    from maskbench.report.kinds import KINDS

    kinds = re.search(r"enum: \[(objectives[^\]]*)\]", (REPO / "workflow/schemas/params.schema.yaml").read_text())
    assert set(KINDS) == {k.strip() for k in kinds.group(1).split(",")}
    assert all(kind.__name__ == f"maskbench.report.{name}" for name, kind in KINDS.items())
    assert not [kind.CARD.label for kind in KINDS.values() if "_" in kind.CARD.label]
