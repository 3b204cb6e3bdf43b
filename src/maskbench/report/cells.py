"""The cells of a runs-by-tasks table, and its control rows, from the fine-tuning summaries.

Every kind of table that has a column per task (table1's `objectives`, the grids, the ablations,
Look Around) shows a (run, task) cell alike. Every number is "<centre> ± <std over seeds>", the
centre being the task's `aggregate` (median for text, mean for molecules, as the papers do) and
the column header saying which. Parts of a cell are separated by slashes, in the order the
header lists them: the headline metric, then each `also_report` metric (SQuAD 2.0 "F1 / EM"),
each over the reported split then the extra evaluation splits (MNLI-m/mm). A cell whose summary
is missing, or whose headline score is undefined (ROC-AUC when no task has both classes), says
"not computed" and why instead of showing a number. Its marks: † the run did not learn the task,
‡ it fine-tuned below its own frozen-feature probe. The LEARNING column says how far a run's
pretraining got below its corpus's unigram loss; the controls (the `none` runs, the tasks'
trivial and ECFP baselines) are rows of the same columns.
Every file is read under `root` at the paths of maskbench.paths, the report stage's inputs.
"""

from __future__ import annotations

import json
from pathlib import Path

from maskbench import paths
from maskbench.config import pretraining_runs, pretrains, table_cells, task_seeds
from maskbench.eval.aggregate import aggregate_method, over_pretraining_seeds, reported_metrics
from maskbench.eval.metrics import SPAN_METRICS, metric_label, undefined
from maskbench.eval.verdict import A_BETTER
from maskbench.io import reading
from maskbench.report import markdown
from maskbench.report.missing import Missing
from maskbench.report.published import control_run


# The marks of a table cell: † the run did not learn the task (`eval.verdict.DID_NOT_LEARN`, the
# outcome against the `none` control), ‡ it fine-tuned below its own frozen-feature probe.
DID_NOT_LEARN_MARK, BELOW_PROBE = "†", "‡"
LEARNING = "pretraining: nats below the unigram loss (validation loss)"


def read_existing(files: dict) -> dict:
    """The JSON files of `files` (key -> path) that exist; a missing one is not computed."""
    return {key: json.loads(path.read_text()) for key, path in files.items() if path.exists()}


def read_summaries(config: dict, root: Path, cells: list[tuple[str, str]], probes: bool = False) -> dict:
    """Each (declared run, task) cell's fine-tuning summary over its pretraining seeds, the
    seeds found combined by `over_pretraining_seeds` (or, with `probes`, the probes' metrics,
    their mean value); `pretraining_missing` names the seeds not computed yet. A cell with none
    is left out (not computed)."""
    pattern, combine = ((paths.PROBE_METRICS, _mean_value) if probes
                        else (paths.FINETUNE_SUMMARY, over_pretraining_seeds))
    found = {}
    for run, task in cells:
        instances = pretraining_runs(config, run)
        summaries = read_existing({i: root / pattern.format(run=i, task=task) for i in instances})
        if summaries:
            found[run, task] = {**combine(summaries),
                                "pretraining_missing": [i for i in instances if i not in summaries]}
    return found


def _mean_value(found: dict[str, dict]) -> dict:
    """Probes of a run's pretraining seeds as one: their mean `value` (undefined if one is)."""
    values = [p["value"] for p in found.values()]
    return {**next(iter(found.values())), "value": None if any(undefined(v) for v in values)
            else sum(values) / len(values)}


# Why a headline score can be undefined (NaN), by metric.
UNDEFINED = {"roc_auc": "no task has both classes"}


def pretrain_metrics(root: Path, run: str) -> dict | Missing:
    """The run's `runs/pretrain/{run}/metrics.json`, or why it cannot be read."""
    path = root / paths.PRETRAIN_METRICS.format(run=run)
    if not path.exists():
        return Missing(f"not computed (no {path.relative_to(root)})")
    with reading(path):
        metrics = json.loads(path.read_text())
    if lacking := [field for field in PRETRAIN_FIELDS if field not in metrics]:  # never read as 0
        return Missing(f"not computed ({path.relative_to(root)} lacks {', '.join(lacking)}, which pretraining now "
                       f"writes: the record is older than the code; re-run `maskbench pretrain --run {run}`)")
    return metrics


# The fields of a pretraining record the report reads, all written by every pretraining run
# (maskbench.train.pretrain.final_metrics).
PRETRAIN_FIELDS = ("unigram_gap", "valid_loss_floor")


def learned_gap(metrics: dict) -> float:
    """How far below the unigram loss a run's validation loss ended, less the part of that loss
    no prediction can lower (`valid_loss_floor`: ExLM's DAG
    transitions, more than a nat per masked token for the uniform DAG; 0 for the others), so a
    DAG that a token-frequency predictor would score above the unigram loss is read against
    what that predictor scores there."""
    return metrics["unigram_gap"] + metrics["valid_loss_floor"]


def learning_cell(config: dict, root: Path, run: str) -> str:
    """The LEARNING column: how far the run's pretraining validation loss ended below its
    corpus's unigram loss (`learned_gap`), in nats, so a reader sees which encoders learned
    more than token frequencies before reading what fine-tuning made of them; with several
    pretraining seeds their mean and range. "(plateau)" where a pretrained seed is less than
    `verdicts.learned_gap` below it (how many, of several); the `none` control shows where
    an untrained encoder stands."""
    gaps = []
    for instance in pretraining_runs(config, run):
        found = pretrain_metrics(root, instance)
        if isinstance(found, Missing):
            return str(found)
        if found.get("unigram_gap") is None:
            return f"not computed (no unigram_gap in {paths.PRETRAIN_METRICS.format(run=instance)})"
        gaps.append(learned_gap(found))
    text = f"{gaps[0]:.2f}" if len(gaps) == 1 else f"{sum(gaps) / len(gaps):.2f} ({min(gaps):.2f} to {max(gaps):.2f})"
    if not pretrains(config, run):
        return f"{text} (untrained)"
    stuck = sum(gap < config["verdicts"]["learned_gap"] for gap in gaps)
    return text + ("" if not stuck else " (plateau)" if len(gaps) == 1 else f" (plateau: {stuck} of {len(gaps)} seeds)")


def learning_context(config: dict, root: Path, runs: list[str]) -> str:
    """What a verdict between `runs` is a verdict on: how far below the unigram loss each ended
    (`learned_gap`, the mean over its pretraining seeds), "barely learned" first where one ended
    less than `verdicts.barely_learned` below it (a "does not hold" between such runs says
    little about the objectives at a budget where they learn)."""
    gaps, missing = {}, []
    for run in dict.fromkeys(runs):
        found = [pretrain_metrics(root, instance) for instance in pretraining_runs(config, run)]
        if any(isinstance(f, Missing) or f.get("unigram_gap") is None for f in found):
            missing.append(f"`{run}`")
            continue
        gaps[run] = sum(learned_gap(f) for f in found) / len(found)
    shown = ", ".join(f"`{run}` {gap:.2f}" for run, gap in gaps.items())
    text = (f"{shown} nats below the unigram loss" if gaps else "") + (
        f"{'; ' if gaps else ''}not computed for {', '.join(missing)}" if missing else "")
    floor = config["verdicts"]["barely_learned"]
    weak = [f"`{run}`" for run, gap in gaps.items() if gap < floor]
    return f"barely learned ({', '.join(weak)} < {floor:g} nats below the unigram loss): {text}" if weak else text


def learning_note(config: dict) -> str:
    """What the LEARNING column measures, for the tables that carry it."""
    return (f"{LEARNING.capitalize()}: the run's pretraining validation loss subtracted from its "
            "corpus's unigram loss (the cross-entropy of token frequencies alone), in nats; positive: the encoder "
            f"predicts better than token frequencies. \"(plateau)\": less than {config['verdicts']['learned_gap']} "
            "nats below, a run that learned no more than token frequencies, whatever its fine-tuning shows. "
            "Each objective's own validation loss (AR and DAR: next-token prediction; the masked objectives: "
            "their masked tokens), so compare the gaps, not the losses. ExLM's DAG: the loss less what its "
            "transitions alone cost (`valid_loss_floor`, where the run records it), which a token-frequency "
            "predictor pays on top of the unigram loss.")


def cell(summary: dict | None, applicable: bool) -> str:
    if not applicable:
        return "—"
    if summary is None:
        return "not computed"
    if undefined(summary["value"]):
        why = UNDEFINED.get(summary["metric"], f"{summary['metric']} is undefined (NaN)")
        return f"not computed ({why} on {summary['split']})"
    metrics = {summary["metric"]: summary, **summary.get("also_report", {})}
    text = " / ".join(_number(metric, part) for metric, parts in metrics.items()
                      for part in (parts, *parts.get("extra", {}).values()))
    if "pretraining" in summary:
        spread = summary["pretraining"]
        text += f" [pretraining ± {_scaled(summary['metric'], spread['std'])}, {len(spread['values'])} seeds]"
    done = summary["seeds_expected"] - len(summary["seeds_missing"])
    text = text if done == summary["seeds_expected"] else f"{text} ({done}/{summary['seeds_expected']} seeds)"
    missing = summary.get("pretraining_missing", [])
    return f"{text} (pretraining seeds not computed: {', '.join(missing)})" if missing else text


def _number(metric: str, part: dict) -> str:
    """"<centre> ± <std>", in % (RMSE as is, to three decimals)."""
    if undefined(part["value"]):
        return "undefined"
    return f"{_scaled(metric, part['value'])} ± {_scaled(metric, part['std'])}"


def _scaled(metric: str, value: float) -> str:
    """A score in % to one decimal, RMSE as is to three."""
    return f"{value:.3f}" if metric == "rmse" else f"{100 * value:.1f}"


def controlled_cell(text: str, probe: dict | None, metric: str, probe_wins: str | None) -> str:
    """A fine-tuned cell with the probe of the same encoder beside it ("probe —" for QA, which
    is not probed), ‡ when the probe is better than the fine-tuned run beyond the noise
    (`probe_wins`: that comparison's outcome, a = the probe). † follows it where the run did not
    learn the task (`maskbench.report.table.learned_mark`)."""
    if metric in SPAN_METRICS:
        return text + " (probe —)"
    if probe is None or undefined(probe["value"]):
        return text + " (probe not computed)"
    text += f" (probe {_scaled(metric, probe['value'])})"
    return text + (f" {BELOW_PROBE}" if probe_wins == A_BETTER else "")


def baseline_rows(config: dict, table: str, root: Path) -> list[list[str]]:
    """One row per baseline any task of the table has (read from the tasks' baseline metrics
    under `root`): its label, then per task the baseline's score, "—" where it does not apply,
    "not computed" where the task's baselines are missing; one "baselines" row of "not computed"
    where no task of the table has its baselines yet."""
    tasks = config["tables"][table]["tasks"]
    found = read_existing({t: root / paths.BASELINE_METRICS.format(task=t) for t in tasks})
    names = dict.fromkeys(name for t in tasks for name in found.get(t, {}).get("baselines", {}))
    rows = []
    for name in names:
        label = next(found[t]["baselines"][name]["label"] for t in tasks
                     if name in found.get(t, {}).get("baselines", {}))
        cells = []
        for task in tasks:
            entry = found[task]["baselines"].get(name) if task in found else None
            cells.append("not computed" if task not in found else "—" if entry is None
                         else "undefined" if undefined(entry["value"])
                         else _scaled(found[task]["metric"], entry["value"]))
        rows.append([f"baseline: {label}", *cells])
    if not rows and any(t not in found for t in tasks):
        rows.append(["baselines", *("not computed" if t not in found else "—" for t in tasks)])
    return rows


def control_lines(config: dict, table: str, root: Path) -> list[str]:
    """The controls a grid table's cells are read against, as a table of their own with the
    grid's task columns: the `none` run of each task's modality (what † compares with) and the
    tasks' trivial and ECFP baselines."""
    tasks = config["tables"][table]["tasks"]
    pairs = table_cells(config, table)
    nones = dict.fromkeys(control_run(config, table, config["tasks"][t]["modality"]) for t in tasks)
    summaries = read_summaries(config, root, [(n, t) for n in nones if n for t in tasks if (n, t) in pairs])
    rows = [[f"control: no pretraining (`{none}`)",
             *(cell(summaries.get((none, t)), (none, t) in pairs) for t in tasks)]
            for none in nones if none]
    rows += baseline_rows(config, table, root)
    if not rows:
        return ["No control: the table lists no `none` run and its tasks have no baselines."]
    header = ["control", *(config["tasks"][t]["label"] for t in tasks)]
    return ["Controls (the same fine-tuning of the untrained encoder, and the tasks' baselines):", "",
            *markdown.table(header, rows)]


def column_header(config: dict, task: str, summary: dict | None) -> str:
    """A task's column as a reader names it: "MNLI-m/mm (GLUE) — accuracy (%), dev / dev
    mismatched, median ± std of 5 seeds" (the metrics as the papers write them, their unit)."""
    spec = config["tasks"][task]
    how = summary["aggregate"] if summary else aggregate_method(spec)
    split = " / ".join([summary["split"], *summary.get("extra", {})]).replace("_", " ") if summary else "?"
    metrics = " / ".join(metric_label(m) for m in reported_metrics(spec)) + ("" if spec["metric"] == "rmse" else " (%)")
    return f"{spec['label']} — {metrics}, {split}, {how} ± std of {len(task_seeds(config, task))} seeds"
