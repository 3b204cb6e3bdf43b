"""Build `reports/tableN.md` from the per-(run, task) fine-tuning summaries.

One row per pretraining run, one column per task (named by what the dataset is, so a stand-in
is never mistaken for the benchmark it stands in for). Every number is "<centre> ± <std over
seeds>", the centre being the task's `aggregate` (median for text, mean for molecules, as the
papers do) and the column header saying which. Parts of a cell are separated by slashes, in the
order the header lists them: the headline metric, then each `also_report` metric (SQuAD 2.0
"F1 / EM"), each over the reported split then the extra evaluation splits (MNLI-m/mm). A cell
whose summary is missing, or whose headline score is undefined (ROC-AUC when no task has both
classes), says "not computed" and why instead of showing a number.

A row is read against its controls: the `none` runs ("control: no pretraining", the encoder
fine-tuned from its random initialisation) and one row per trivial baseline the baseline
stage scored (`runs/baseline/{task}/metrics.json`; "—" where a baseline does not apply). Every
run row names its position scheme, since it alone can decide whether a small encoder learns.
Beside each fine-tuned cell stands the frozen-feature probe of the same encoder ("probe x",
`runs/probe/{run}/{task}/metrics.json`; QA is not probed), marked when the probe's predictions
beat the fine-tuned seeds' beyond the noise (the verdicts' rule: fine-tuning lost what
pretraining learned); a cell whose run is not better than the `none` control beyond the noise
is marked "did not learn". Below: the papers' published rows and a verdict on each of their
claims by the noise rule (maskbench.report.published, maskbench.eval.verdict), and the rule in
one paragraph.
Every file is read under `root` at the paths of maskbench.paths, the report stage's inputs.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

from maskbench import paths
from maskbench.config import params_hash, position_scheme, pretraining_runs, table_cells, task_seeds
from maskbench.controls import TRIVIAL
from maskbench.eval.aggregate import aggregate_method, over_pretraining_seeds, reported_metrics
from maskbench.eval.metrics import SPAN_METRICS, undefined
from maskbench.eval.verdict import A_BETTER
from maskbench.io import reading
from maskbench.provenance import git_commit
from maskbench.report.evidence import TaskEvidence
from maskbench.report.figures import training_curves
from maskbench.report.missing import Missing
from maskbench.report.published import (
    Rendered,
    Verdict,
    claims_decided_by,
    control_run,
    published_rows,
    verdict,
)

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
    pattern, combine = (paths.PROBE_METRICS, _mean_value) if probes else (paths.FINETUNE_SUMMARY, over_pretraining_seeds)
    found = {}
    for run, task in cells:
        instances = pretraining_runs(config, run)
        summaries = read_existing({i: root / pattern.format(run=i, task=task) for i in instances})
        if summaries:
            found[run, task] = {**combine(summaries), "pretraining_missing": [i for i in instances if i not in summaries]}
    return found


def _mean_value(found: dict[str, dict]) -> dict:
    """Probes of a run's pretraining seeds as one: their mean `value` (undefined if one is)."""
    values = [p["value"] for p in found.values()]
    return {**next(iter(found.values())), "value": None if any(undefined(v) for v in values) else sum(values) / len(values)}


# Why a headline score can be undefined (NaN), by metric.
UNDEFINED = {"roc_auc": "no task has both classes"}


def pretrain_metrics(root: Path, run: str) -> dict | Missing:
    """The run's `runs/pretrain/{run}/metrics.json`, or why it cannot be read."""
    path = root / paths.PRETRAIN_METRICS.format(run=run)
    if not path.exists():
        return Missing(f"not computed (no {path.relative_to(root)})")
    with reading(path):
        return json.loads(path.read_text())


def learning_cell(config: dict, root: Path, run: str) -> str:
    """The LEARNING column: how far the run's pretraining validation loss ended below its
    corpus's unigram loss (`unigram_gap`), in nats, so a reader sees which encoders learned
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
        gaps.append(found["unigram_gap"])
    text = f"{gaps[0]:.2f}" if len(gaps) == 1 else f"{sum(gaps) / len(gaps):.2f} ({min(gaps):.2f} to {max(gaps):.2f})"
    if config["runs"][run]["objective"] == "none":
        return f"{text} (untrained)"
    stuck = sum(gap < config["verdicts"]["learned_gap"] for gap in gaps)
    return text + ("" if not stuck else " (plateau)" if len(gaps) == 1 else f" (plateau: {stuck} of {len(gaps)} seeds)")


def learning_note(config: dict) -> str:
    """What the LEARNING column measures, for the tables that carry it."""
    return (f"{LEARNING.capitalize()}: the run's pretraining validation loss subtracted from its "
            "corpus's unigram loss (the cross-entropy of token frequencies alone), in nats; positive: the encoder "
            f"predicts better than token frequencies. \"(plateau)\": less than {config['verdicts']['learned_gap']} "
            "nats below, a run that learned no more than token frequencies, whatever its fine-tuning shows. "
            "Each objective's own validation loss (AR and DAR: next-token prediction; the masked objectives: "
            "their masked tokens), so compare the gaps, not the losses.")


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


def controlled_cell(text: str, probe: dict | None, metric: str, learned: str | None, probe_wins: str | None) -> str:
    """A fine-tuned cell with its controls: the probe of the same encoder beside it ("probe —"
    for QA, which is not probed), ‡ when the probe is better than the fine-tuned run beyond the
    noise (`probe_wins`: that comparison's outcome, a = the probe), † when the run is not better
    than `none` beyond the noise (`learned`: that comparison's outcome)."""
    if metric in SPAN_METRICS:
        text += " (probe —)"
    elif probe is None or undefined(probe["value"]):
        text += " (probe not computed)"
    else:
        text += f" (probe {_scaled(metric, probe['value'])})"
        if probe_wins == A_BETTER:
            text += f" {BELOW_PROBE}"
    if learned is not None and learned != A_BETTER:
        text += f" {DID_NOT_LEARN_MARK}"
    return text


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
        label = next(found[t]["baselines"][name]["label"] for t in tasks if name in found.get(t, {}).get("baselines", {}))
        cells = []
        for task in tasks:
            entry = found[task]["baselines"].get(name) if task in found else None
            cells.append("not computed" if task not in found else "—" if entry is None
                         else "undefined" if undefined(entry["value"]) else _scaled(found[task]["metric"], entry["value"]))
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
    rows = [[f"control: no pretraining (`{none}`)", *(cell(summaries.get((none, t)), (none, t) in pairs) for t in tasks)]
            for none in nones if none]
    rows += baseline_rows(config, table, root)
    if not rows:
        return ["No control: the table lists no `none` run and its tasks have no baselines."]
    header = ["control", *(config["tasks"][t]["label"] for t in tasks)]
    return ["Controls (the same fine-tuning of the untrained encoder, and the tasks' baselines):", "",
            "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def column_header(config: dict, task: str, summary: dict | None) -> str:
    spec = config["tasks"][task]
    how = summary["aggregate"] if summary else aggregate_method(spec)
    split = " / ".join([summary["split"], *summary.get("extra", {})]) if summary else "?"
    metrics = " / ".join(reported_metrics(spec))
    return f"{spec['label']} — {metrics}, {split}, {how} ± std of {len(task_seeds(config, task))} seeds"


def render(config: dict, table: str, root: Path = Path("."), figures: Path | None = None) -> Rendered:
    """The table's markdown from the files under `root` (the repository: its results, and the
    commit the footer names); its figures drawn into the directory `figures`, if given."""
    spec = config["tables"][table]
    runs, tasks = config["runs"], config["tasks"]
    cells = table_cells(config, table)
    summaries = read_summaries(config, root, cells)
    probes = read_summaries(config, root, cells, probes=True)
    evidence = {t: TaskEvidence(config, t, root) for t in spec["tasks"]}
    first = {t: next((s for (r, tt), s in summaries.items() if tt == t), None) for t in spec["tasks"]}
    header = ["run", "objective", "positions"] + [column_header(config, t, first[t]) for t in spec["tasks"]] + [LEARNING]
    lines = [f"# {table}: {spec['title']}", "",
             (f"Profile `{config['profile']}`; scores in % (RMSE as is), over fine-tuning seeds as each column says; "
             "a cell's parts follow its header's order (metrics, then splits), then the frozen-feature probe of the "
             "same encoder. `—`: does not apply (the run's modality is not the task's, or the baseline does not "
             f"apply). {BELOW_PROBE}: fine-tuned below its own probe beyond the noise. "
             f"{DID_NOT_LEARN_MARK}: not better than the `none` control beyond the noise (did not learn; the task "
             "leaves the claims that use this run)."), "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in spec["runs"]:
        none = control_run(config, table, runs[run]["modality"])
        name = f"control: no pretraining (`{run}`)" if runs[run]["objective"] == "none" else run
        row = [name, runs[run]["objective"], position_scheme(config, run)]
        for task in spec["tasks"]:
            text = cell(summaries.get((run, task)), (run, task) in cells)
            if (run, task) in cells:
                learned = None if none in (None, run) else evidence[task].compare(run, none)
                probe = probes.get((run, task))
                probe_wins = None if probe is None else evidence[task].probe_against_run(run)
                text = controlled_cell(text, probe, tasks[task]["metric"], getattr(learned, "outcome", None),
                                       getattr(probe_wins, "outcome", None))
            row.append(text)
        row.append(learning_cell(config, root, run))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["| " + " | ".join([label, "—", "—", *cells, "—"]) + " |"  # no objective, positions or pretraining
              for label, *cells in baseline_rows(config, table, root)]
    published = published_rows(config, table)
    for citation, paper_row, paper_cells in published:
        name = paper_row["model"].replace("*", "\\*")
        lines.append(f"| published: {name} ({citation.split(' (')[0]}) | {paper_row['objective']} | — | "
                     + " | ".join(paper_cells) + " | — |")
    if published:
        lines += ["", "Published rows are the papers' own numbers (their models, data, splits and scale) from "
                  + "; ".join(dict.fromkeys(c for c, _, _ in published)) + ". They appear only in columns whose "
                  "dataset is the benchmark the paper measured, and set the scale: they are not a like-for-like "
                  "comparison unless this is the `paper` profile."]
    lines += ["", "Which tasks can decide (a pretrained arm better than both the `none` control and the task's "
              "trivial baseline beyond the noise):"]
    lines += [f"- {tasks[t]['label']}: {deciding(config, table, t, evidence[t])}" for t in spec["tasks"]]
    verdicts = [Verdict(c["id"], verdict(config, table, c, evidence)) for c in claims_decided_by("objectives")]
    lines += closing_lines(config, table, root, figures, "Claims of the papers, checked on our rows:", verdicts)
    return Rendered("\n".join(lines), verdicts)


def closing_lines(config: dict, table: str, root: Path, figures: Path | None, heading: str,
                  verdicts: list[Verdict]) -> list[str]:
    """What every runs-by-tasks table ends with: what its LEARNING column measures, its claims'
    verdicts under `heading`, the noise rule, the training-curves figure (drawn into `figures`),
    the datasets of its columns and where it came from."""
    lines = ["", learning_note(config), "", heading, *(v.line() for v in verdicts), "", how_a_claim_is_decided(config)]
    if figures is not None:
        lines += ["", *figure_links(table, {"training.png": "training and validation loss of the table's runs"})]
        training_figure(config, table, root, figures)
    return lines + ["", *dataset_lines(config, config["tables"][table]["tasks"]), "", generated_line(config, root), ""]


def dataset_lines(config: dict, tasks: list[str]) -> list[str]:
    """Which dataset filled each task's column (a stand-in is named as one)."""
    lines = ["Datasets:"]
    for task in tasks:
        spec = config["tasks"][task]
        lines.append(f"- {spec['label']}: `{spec['dataset']}` — {config['datasets'][spec['dataset']].get('description', '')}")
    return lines


def provenance(config: dict, root: Path) -> dict:
    """What a table comes from: the profile, the git commit of `root` and the params hash, and when."""
    return {"profile": config["profile"], "git_commit": git_commit(root), "params_hash": params_hash(config),
            "generated": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"}


def generated_line(config: dict, root: Path) -> str:
    found = provenance(config, root)
    return f"Generated {found['generated']} from git commit `{found['git_commit']}`, params hash `{found['params_hash']}`."


def figure_links(table: str, figures: dict[str, str]) -> list[str]:
    """Markdown links, relative to the table's file, to its figures (file name -> what it shows)."""
    where = Path(paths.FIGURES.format(table=table)).relative_to(Path(paths.REPORT.format(table=table)).parent)
    return ["Figures:", *(f"- [{what}]({(where / name).as_posix()})" for name, what in figures.items())]


def training_figure(config: dict, table: str, root: Path, figures: Path) -> None:
    """training.png: the loss curves of the table's pretrained runs, with each modality's
    unigram loss (from the runs' metrics.json) as the line a run must get below to have
    learned more than token frequencies."""
    runs = [r for r in config["tables"][table]["runs"] if config["runs"][r]["objective"] != "none"]
    metrics = read_existing({r: root / paths.PRETRAIN_METRICS.format(run=r) for r in runs})
    unigram = {config["runs"][r]["modality"]: m["unigram_loss"] for r, m in metrics.items() if "unigram_loss" in m}
    training_curves(figures / "training.png", root, {r: config["runs"][r]["modality"] for r in runs}, unigram)


def deciding(config: dict, table: str, task: str, evidence: TaskEvidence) -> str:
    """Whether `task` can tell objectives apart at this scale: which pretrained arms of the
    table beat both the `none` control and the task's trivial baseline (`TRIVIAL`) beyond the
    noise. A trivial baseline with no defined score (a constant has no correlation) is no bar."""
    runs, spec = config["runs"], config["tasks"][task]
    none = control_run(config, table, spec["modality"])
    arms = [r for r in config["tables"][table]["runs"]
            if runs[r]["modality"] == spec["modality"] and runs[r]["objective"] != "none"]
    trivial = TRIVIAL[spec["kind"]]
    if none is None or not arms:
        return "not checked (the table has no `none` control or no pretrained run of this modality)"
    outcomes, why_not = [], []
    for run in arms:
        against = {"`none`": evidence.compare(run, none), trivial: evidence.compare_to_baseline(run, trivial)}
        missing = [f"{name}: {c}" for name, c in against.items() if isinstance(c, Missing)]
        if missing:
            why_not.append(f"`{run}` not computed ({'; '.join(missing)})")
            continue
        bars = [name for name, c in against.items() if not (name == trivial and math.isnan(c.low))]
        lost = [name for name in bars if against[name].outcome != A_BETTER]
        if lost:
            why_not.append(f"`{run}` not better than {' or '.join(lost)}")
        else:
            outcomes.append(f"`{run}`")
    if outcomes:
        return f"decides: {', '.join(outcomes)} beat `none` and the {trivial} baseline" + (
            f" ({'; '.join(why_not)})" if why_not else "")
    return f"does not decide at this scale: {'; '.join(why_not)}"


def how_a_claim_is_decided(config: dict) -> str:
    """The footer: the noise rule in one paragraph (docs/verdicts.md)."""
    s = config["verdicts"]
    seeds = config["pretrain"]["seeds"]
    levels = (f"the pretraining seeds of both runs ({len(seeds)} each, `pretrain.seeds`) with replacement, then the "
              "fine-tuning seeds within each drawn pretraining seed with replacement (independently per run: the "
              "Multi-Bootstrap)" if len(seeds) > 1 else
              "the fine-tuning seeds of both runs with replacement (independently per run; one pretraining seed per "
              "run, so every verdict is conditional on that pretraining run: another pretraining seed may decide "
              "otherwise)")
    return (f"How a claim is decided: on each task, {s['bootstrap']} bootstrap resamples each draw {levels} "
            "and the test examples with replacement "
            "(the same examples for both runs: a paired comparison; dev where the task has no test labels), "
            "rescore every drawn seed's predictions on the drawn examples with the column's headline metric, "
            "average over the drawn seeds and take the difference, signed so that positive favours the claim "
            "(lower RMSE is better); a resample whose score is undefined (one class only for ROC-AUC) is dropped. "
            f"The task is decided for one run when the {100 * s['confidence']:g} % percentile interval of the "
            "difference excludes zero, and not decided otherwise. A run that is not better than the `none` control "
            "of its modality by the same test did not learn the task, which then leaves the claim. A claim holds "
            "when its first run is better on more decided tasks than the other, does not hold when on fewer, is "
            "mixed when on as many, and is not decided when no task is; each verdict says on how many tasks it "
            f"was decided. Draws are fixed by seed {s['seed']}. The predictions are each seed's best grid point, "
            "the same as the summaries' with a one-point grid.")
