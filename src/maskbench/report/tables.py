"""Build `reports/tableN.md` from fine-tuning metrics files.

One row per pretraining run, one column per task (named by what the dataset is, so a stand-in
is never mistaken for the benchmark it stands in for), mean ± std over seeds. A cell whose
metrics are missing says so instead of showing a number.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np

from maskbench import paths
from maskbench.config import params_hash
from maskbench.train.tracking import git_commit


def collect(config: dict, table: str, root: Path) -> dict[tuple[str, str], list[float]]:
    """Test scores per (run, task) over the configured seeds; missing files are left out."""
    spec, scores = config["tables"][table], {}
    for run in spec["runs"]:
        for task in spec["tasks"]:
            values = []
            for seed in config["finetune"]["seeds"]:
                path = root / paths.FINETUNE_METRICS.format(run=run, task=task, seed=seed)
                if path.exists():
                    values.append(json.loads(path.read_text())["test"])
            scores[(run, task)] = values
    return scores


def cell(values: list[float], expected: int, applicable: bool) -> str:
    if not applicable:
        return "—"
    if not values:
        return "not computed"
    text = f"{100 * np.mean(values):.1f} ± {100 * np.std(values, ddof=1 if len(values) > 1 else 0):.1f}"
    return text if len(values) == expected else f"{text} ({len(values)}/{expected} seeds)"


def render(config: dict, table: str, root: Path) -> str:
    spec = config["tables"][table]
    runs, tasks = config["runs"], config["tasks"]
    scores = collect(config, table, root)
    seeds = len(config["finetune"]["seeds"])
    header = ["run", "objective"] + [f"{tasks[t]['label']} — {tasks[t]['metric']} (test)" for t in spec["tasks"]]
    lines = [f"# {table}: {spec['title']}", "",
             f"Profile `{config['profile']}`; mean ± std over {seeds} fine-tuning seeds, in %. "
             "`—`: the run's modality does not match the task.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in spec["runs"]:
        row = [run, runs[run]["objective"]]
        for task in spec["tasks"]:
            applicable = runs[run]["modality"] == tasks[task]["modality"]
            row.append(cell(scores[(run, task)], seeds, applicable))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Datasets:"]
    for task in spec["tasks"]:
        ds = config["datasets"][tasks[task]["dataset"]]
        lines.append(f"- {tasks[task]['label']}: `{tasks[task]['dataset']}` — {ds.get('description', '')}")
    lines += ["", f"Generated {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC from git commit "
              f"`{git_commit(root)}`, params hash `{params_hash(config)}`.", ""]
    return "\n".join(lines)
