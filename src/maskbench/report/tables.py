"""Build `reports/tableN.md` from the per-(run, task) fine-tuning summaries.

One row per pretraining run, one column per task (named by what the dataset is, so a stand-in
is never mistaken for the benchmark it stands in for). Every number is "<centre> ± <std over
seeds>", the centre being the task's `aggregate` (median for text, mean for molecules, as the
papers do) and the column header saying which. Parts of a cell are separated by slashes, in the
order the header lists them: the headline metric, then each `also_report` metric (SQuAD 2.0
"F1 / EM"), each over the reported split then the extra evaluation splits (MNLI-m/mm). A cell
whose summary is missing, or whose headline score is undefined (ROC-AUC when no task has both
classes), says "not computed" and why instead of showing a number. Below our rows: the papers'
published rows and a verdict on each of their claims (maskbench.report.published).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from maskbench.config import params_hash, task_seeds
from maskbench.eval.aggregate import aggregate_method, reported_metrics
from maskbench.eval.metrics import undefined
from maskbench.provenance import git_commit
from maskbench.report.published import load_published, published_rows, verdict


def load_summaries(paths: dict[tuple[str, str], Path]) -> dict[tuple[str, str], dict]:
    """The summaries that exist of the (run, task) cells at `paths` (a missing one: not computed)."""
    return {cell: json.loads(path.read_text()) for cell, path in paths.items() if path.exists()}


# Why a headline score can be undefined (NaN), by metric.
UNDEFINED = {"roc_auc": "no task has both classes"}


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
    done = summary["seeds_expected"] - len(summary["seeds_missing"])
    return text if done == summary["seeds_expected"] else f"{text} ({done}/{summary['seeds_expected']} seeds)"


def _number(metric: str, part: dict) -> str:
    """"<centre> ± <std>", in % (RMSE as is, to three decimals)."""
    scale, digits = (1, 3) if metric == "rmse" else (100, 1)
    if undefined(part["value"]):
        return "undefined"
    return f"{scale * part['value']:.{digits}f} ± {scale * part['std']:.{digits}f}"


def column_header(config: dict, task: str, summary: dict | None) -> str:
    spec = config["tasks"][task]
    how = summary["aggregate"] if summary else aggregate_method(spec)
    split = " / ".join([summary["split"], *summary.get("extra", {})]) if summary else "?"
    metrics = " / ".join(reported_metrics(spec))
    return f"{spec['label']} — {metrics}, {split}, {how} ± std of {len(task_seeds(config, task))} seeds"


def render(config: dict, table: str, summary_paths: dict[tuple[str, str], Path], root: Path = Path(".")) -> str:
    """The table's markdown from the fine-tuning summaries of its (run, task) cells; `root`:
    the repository whose commit the footer names."""
    spec = config["tables"][table]
    runs, tasks = config["runs"], config["tasks"]
    summaries = load_summaries(summary_paths)
    first = {t: next((s for (r, tt), s in summaries.items() if tt == t), None) for t in spec["tasks"]}
    header = ["run", "objective"] + [column_header(config, t, first[t]) for t in spec["tasks"]]
    lines = [f"# {table}: {spec['title']}", "",
             f"Profile `{config['profile']}`; scores in % (RMSE as is), over fine-tuning seeds as each column says; "
             "a cell's parts follow its header's order (metrics, then splits). "
             "`—`: the run's modality does not match the task.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in spec["runs"]:
        row = [run, runs[run]["objective"]]
        for task in spec["tasks"]:
            applicable = runs[run]["modality"] == tasks[task]["modality"]
            row.append(cell(summaries.get((run, task)), applicable))
        lines.append("| " + " | ".join(row) + " |")
    published = published_rows(config, table)
    for citation, paper_row, cells in published:
        name = paper_row["model"].replace("*", "\\*")
        lines.append(f"| published: {name} ({citation.split(' (')[0]}) | {paper_row['objective']} | "
                     + " | ".join(cells) + " |")
    if published:
        lines += ["", "Published rows are the papers' own numbers (their models, data, splits and scale) from "
                  + "; ".join(dict.fromkeys(c for c, _, _ in published)) + ". They appear only in columns whose "
                  "dataset is the benchmark the paper measured, and set the scale: they are not a like-for-like "
                  "comparison unless this is the `paper` profile."]
    lines += ["", "Claims of the papers, checked on our rows:"]
    lines += [f"- {c['claim']} — {c['source']}. Here: {verdict(config, table, summaries, c)}."
              for c in load_published()["claims"]]
    lines += ["", "Datasets:"]
    for task in spec["tasks"]:
        ds = config["datasets"][tasks[task]["dataset"]]
        lines.append(f"- {tasks[task]['label']}: `{tasks[task]['dataset']}` — {ds.get('description', '')}")
    lines += ["", f"Generated {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC from git commit "
              f"`{git_commit(root)}`, params hash `{params_hash(config)}`.", ""]
    return "\n".join(lines)
