"""The parts a table's page ends with, below its table: the noise rule its verdicts follow, its
figures (drawn, and linked from the page), the datasets of its columns, and the line naming the
profile, git commit and params hash it was generated from (`provenance`, which the table's card
and the index record too) and the arithmetic its jobs computed with (`arithmetic_sentence`, in the phrases
maskbench.report.arithmetic writes and `maskbench compare` reads back). Shared by every kind of
table, so each says them in the same words.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
from pathlib import Path

from maskbench import paths
from maskbench.config import params_hash, pretrained, pretraining_runs, table_kind
from maskbench.eval.verdict import FEW_PRETRAINING_SEEDS
from maskbench.provenance import git_commit
from maskbench.report.arithmetic import UNRECORDED, describe
from maskbench.report.cells import learning_note, read_existing
from maskbench.report.departures import departure_lines
from maskbench.report.figures import training_curves
from maskbench.report.published import Verdict


def closing_lines(config: dict, table: str, root: Path, figures: Path | None, heading: str,
                  verdicts: list[Verdict]) -> list[str]:
    """What every runs-by-tasks table ends with: what its LEARNING column measures, its claims'
    verdicts under `heading`, the noise rule, the training-curves figure (drawn into `figures`),
    the datasets of its columns and where it came from."""
    lines = ["", learning_note(config), "", heading, *(v.line() for v in verdicts), "", how_a_claim_is_decided(config)]
    if figures is not None:
        lines += ["", *figure_links(table, {"training.png": "training and validation loss of the table's runs"})]
        training_figure(config, table, root, figures)
    return lines + ["", *dataset_lines(config, config["tables"][table]["tasks"]), *departure_lines(config, table), "",
                    generated_line(config, root, table), ""]


def how_a_claim_is_decided(config: dict) -> str:
    """The footer: the noise rule in one paragraph (docs/verdicts.md)."""
    s = config["verdicts"]
    seeds = config["pretrain"]["seeds"]
    levels = (f"the pretraining seeds of each run ({len(seeds)}, `pretrain.seeds`) with replacement, each with the "
              "mean of its fine-tuning seeds (whose share of the noise the pretraining seeds' spread already holds), "
              "one draw for every task of a mean" if len(seeds) > 1 else
              "the fine-tuning seeds of each run with replacement (one pretraining seed per run)")
    if len(seeds) < FEW_PRETRAINING_SEEDS:
        levels += (f"; between two recipes, a run of fewer than {FEW_PRETRAINING_SEEDS} pretraining seeds adds the "
                   "pretraining spread src/maskbench/noise.yaml declares for the task to the variance (with one seed "
                   "and none declared, the comparison is not decided), as another pretraining run of its recipe "
                   "would land elsewhere")
    return (f"How a claim is decided: {s['bootstrap']} bootstrap resamples each draw, independently per run, {levels}, "
            "and the test examples of each task with replacement (the same examples for both runs: a paired "
            "comparison; dev where the task has no test labels); every seed's predictions are rescored on the drawn "
            "examples with the column's headline metric and the difference is signed so that positive favours the "
            "claim (lower RMSE is better); a resample whose score is undefined (one class only for ROC-AUC) is "
            "dropped. Few seeds drawn with replacement understate their spread: the drawn deviations are scaled by "
            f"sqrt(n/(n-1)) and the {100 * s['confidence']:g} % interval is Student's t on the resamples' standard "
            "error, with Satterthwaite's degrees of freedom. A claim is decided as its paper states it "
            "(`statistic` in published.yaml): on the mean over its tasks (one bootstrap of that mean; a benchmark the "
            "paper states apart, and any RMSE task, decided beside it), or on each task; a claim of several parts "
            "decides them with Holm's rule, so the chance of any false decision stays at "
            f"{100 * (1 - s['confidence']):g} %. It holds when a part is decided for its first run and none for the "
            "other, does not hold in the opposite case, is mixed when both, and is not decided when no part is. A "
            "run that is not better than the `none` control of its modality on a task did not learn it, and the "
            f"task leaves the claim. Draws are fixed by seed {s['seed']}. The predictions are each seed's best grid "
            "point, the same as the summaries' with a one-point grid.")


def dataset_lines(config: dict, tasks: list[str]) -> list[str]:
    """Which dataset filled each task's column (a stand-in is named as one)."""
    lines = ["Datasets:"]
    for task in tasks:
        spec = config["tasks"][task]
        lines.append(f"- {spec['label']}: `{spec['dataset']}` — "
                     f"{config['datasets'][spec['dataset']].get('description', '')}")
    return lines


def figure_links(table: str, figures: dict[str, str]) -> list[str]:
    """Markdown links, relative to the table's file, to its figures (file name -> what it shows)."""
    where = Path(paths.FIGURES.format(table=table)).relative_to(Path(paths.REPORT.format(table=table)).parent)
    return ["Figures:", *(f"- [{what}]({(where / name).as_posix()})" for name, what in figures.items())]


def training_figure(config: dict, table: str, root: Path, figures: Path) -> None:
    """training.png: the loss curves of the table's pretrained runs, with each modality's
    unigram loss (from the runs' metrics.json) as the line a run must get below to have
    learned more than token frequencies, and, for a run whose transitions cost more than the
    plateau margin (`verdicts.learned_gap`), its own line: the unigram loss plus that cost."""
    runs = pretrained(config, config["tables"][table]["runs"])
    metrics = read_existing({r: root / paths.PRETRAIN_METRICS.format(run=r) for r in runs})
    unigram = {config["runs"][r]["modality"]: m["unigram_loss"] for r, m in metrics.items() if "unigram_loss" in m}
    floors = {r: m["valid_loss_floor"] for r, m in metrics.items() if m.get("valid_loss_floor")}
    training_curves(figures / "training.png", root, {r: config["runs"][r]["modality"] for r in runs}, unigram,
                    floors, floor_shown=config["verdicts"]["learned_gap"])


def provenance(config: dict, root: Path) -> dict:
    """What a table comes from: the profile, the git commit of `root` and the params hash, and when."""
    return {"profile": config["profile"], "git_commit": git_commit(root), "params_hash": params_hash(config),
            "generated": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"}


def generated_line(config: dict, root: Path, table: str | None = None) -> str:
    """Where the page came from; for a `table`, also what arithmetic its jobs computed with."""
    found = provenance(config, root)
    line = (f"Generated {found['generated']} from git commit `{found['git_commit']}`, "
            f"params hash `{found['params_hash']}`.")
    return line if table is None else f"{line} {arithmetic_sentence(config, table, root)}"


# The outputs of a run's jobs on a table's tasks that record their arithmetic
# (maskbench.provenance.arithmetic); then the per-run measures the table's kind reads.
ARITHMETIC_RECORDS = (paths.PRETRAIN_METRICS, paths.FINETUNE_METRICS, paths.PROBE_METRICS)


def arithmetic_sentence(config: dict, table: str, root: Path) -> str:
    """The CPU path, library builds and `cpu_arithmetic` mode recorded by the jobs of `table`'s
    runs on its tasks (maskbench.provenance.arithmetic): their pretraining, fine-tuning, probes,
    and the analyses or generation perplexity its kind reads (not those another table of the same
    runs reads: the count is the table's, whatever else was built). One record when they all
    agree, each with its count when they do not, so a build that differs from another can be told
    apart at a glance."""
    spec = config["tables"][table]
    runs = [instance for run in spec.get("runs", []) for instance in pretraining_runs(config, run)]
    tasks = spec.get("tasks", []) or [None]
    patterns = (*ARITHMETIC_RECORDS, *paths.TABLE_ANALYSES[table_kind(config, table)])
    files = dict.fromkeys(f for pattern in patterns for run in runs for task in tasks
                          for f in sorted(root.glob(pattern.format(run=run, task=task, seed="*"))))
    records = [json.loads(f.read_text()).get("arithmetic") for f in files]
    if not records:
        return "Arithmetic: no job of the table has written its record yet."
    counts = collections.Counter(describe(r) for r in records if r is not None)
    unrecorded = sum(r is None for r in records)
    said = (f"Arithmetic of its runs' {len(records)} job records: {next(iter(counts))}." if len(counts) == 1 else
            f"Arithmetic differs between its runs' {len(records)} job records: " + "; ".join(f"{n} × {d}"
                                                                                for d, n in counts.items()) + ".")
    if unrecorded:
        said = (said if counts
                else "Arithmetic:") + f" {unrecorded} record(s) {UNRECORDED}."
    return said

