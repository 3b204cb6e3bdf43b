"""table1 and table4 (kind `objectives`): pretraining objectives side by side on downstream tasks.

One row per pretraining run, one column per task (named by what the dataset is, so a stand-in
is never mistaken for the benchmark it stands in for), each cell the run's fine-tuning score
over seeds as `maskbench.report.cells` writes it.

A row is read against its controls: the `none` runs ("control: no pretraining", the encoder
fine-tuned from its random initialisation) and one row per trivial baseline the baseline
stage scored (`runs/baseline/{task}/metrics.json`; "—" where a baseline does not apply). Every
run row names its objective's knobs (a variant, e.g. ExLM with a sparse DAG, reads as one) and
its position scheme, since it alone can decide whether a small encoder learns.
Beside each fine-tuned cell stands the frozen-feature probe of the same encoder ("probe x",
`runs/probe/{run}/{task}/metrics.json`; QA is not probed), marked when the probe's predictions
beat the fine-tuned seeds' beyond the noise (the verdicts' rule: fine-tuning lost what
pretraining learned); a cell whose run is not better than the `none` control beyond the noise
is marked "did not learn". Below: the papers' published rows, which tasks can decide between
objectives at this scale, a verdict on each of the papers' claims by the noise rule
(maskbench.report.published, maskbench.eval.verdict), and the rule in one paragraph.
A row under the baselines gives, for each SMILES task, the share of its tokens the tokenizer read
as [UNK] (from the task card). Every file is read under `root` at the paths of maskbench.paths,
the report stage's inputs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from maskbench import paths
from maskbench.config import position_scheme, pretrains
from maskbench.controls import TRIVIAL
from maskbench.eval.verdict import A_BETTER
from maskbench.report import markdown
from maskbench.report.cells import LEARNING, baseline_rows, learning_cell, read_summaries
from maskbench.report.evidence import TaskEvidence
from maskbench.report.footer import closing_lines
from maskbench.report.knobs import knobs_text
from maskbench.report.missing import Missing
from maskbench.report.published import Rendered, claim_runs, claims_decided_by, control_run, published_rows, verdict
from maskbench.report.table import TASKS, TableKind, read_table

CARD = TableKind(
    name="objectives", label="objectives × tasks",
    columns=("run", "objective", "knobs", "positions", TASKS, LEARNING),
    caption=("Profile `{profile}`; scores in % (RMSE as is), over fine-tuning seeds as each column says; "
             "a cell's parts follow its header's order (metrics, then splits), then the frozen-feature probe of the "
             "same encoder. `—`: does not apply (the run's modality is not the task's, or the baseline does not "
             "apply). {below_probe}: fine-tuned below its own probe beyond the noise. "
             "{did_not_learn}: not better than the `none` control beyond the noise (did not learn; the task "
             "leaves the claims that use this run)."),
    claims="Claims of the papers, checked on our rows:")


def render(config: dict, table: str, root: Path = Path("."), figures: Path | None = None) -> Rendered:
    """The table's markdown from the files under `root` (the repository: its results, and the
    commit the footer names); its figures drawn into the directory `figures`, if given."""
    found = read_table(config, table, root)
    probes = read_summaries(config, root, found.pairs, probes=True)
    tasks = found.spec["tasks"]
    body = [[found.run_name(run), config["runs"][run]["objective"], knobs_text(config, run),
             position_scheme(config, run), *(found.task_cell(run, task, probes) for task in tasks),
             learning_cell(config, root, run)]
            for run in found.spec["runs"]]
    no_run = ["—"] * (CARD.columns.index(TASKS) - 1)  # a row of no run: no objective, knobs or positions
    body += [[label, *no_run, *scores, "—"] for label, *scores in baseline_rows(config, table, root)]
    if any(config["tasks"][t]["modality"] == "smiles" for t in tasks):
        body.append([UNKNOWN_ROW, *no_run, *(unknown_cell(config, t, root) for t in tasks), "—"])
    published = published_rows(config, table)
    body += [published_row(citation, row, cells) for citation, row, cells in published]
    lines = [*found.opening(CARD), *markdown.table(found.header(CARD), body), *published_note(published)]
    lines += ["", "Which tasks can decide (a pretrained arm better than both the `none` control and the task's "
              "trivial baseline beyond the noise):"]
    lines += [f"- {config['tasks'][t]['label']}: {deciding(config, table, t, found.evidence[t])}" for t in tasks]
    verdicts = [found.verdict(c["id"], verdict(config, table, c, found.evidence),
                              [r for side in claim_runs(config, table, c) for r in side])
                for c in claims_decided_by(CARD.name)]
    lines += closing_lines(config, table, root, figures, CARD.claims, verdicts)
    return Rendered("\n".join(lines), verdicts)


def published_row(citation: str, row: dict, cells: list[str]) -> list[str]:
    """A paper's row under ours: its model (a "*" escaped, not read as emphasis) and objective."""
    name = row["model"].replace("*", "\\*")
    return [f"published: {name} ({citation.split(' (')[0]})", row["objective"], "—", "—", *cells, "—"]


def published_note(published: list) -> list[str]:
    """What the papers' rows below ours are, and are not; nothing where the table has none."""
    if not published:
        return []
    return ["", "Published rows are the papers' own numbers (their models, data, splits and scale) from "
            + "; ".join(dict.fromkeys(c for c, _, _ in published)) + ". They appear only in columns whose "
            "dataset is the benchmark the paper measured, and set the scale: they are not a like-for-like "
            "comparison: even the `paper` profile departs from the papers' recipes (their corpora, "
            "MoleculeNet's splits: docs/paper-profile.md; under it, the end of this page lists where)."]


UNKNOWN_ROW = "tokens read as [UNK] (train / dev / test, task card)"


def unknown_cell(config: dict, task: str, root: Path) -> str:
    """A SMILES task's [UNK] share per split from its card (`maskbench.data.unknown`): what the
    pretrained tokenizer could not read of the molecules the column scores; "—" for a text task."""
    if config["tasks"][task]["modality"] != "smiles":
        return "—"
    card = root / paths.TASK_CARD.format(task=task)
    if not card.exists():
        return "not computed (no task card)"
    shares = json.loads(card.read_text()).get("unknown_tokens")
    if shares is None:
        return f"not recorded ({card.name} predates the count: rerun the task stage)"
    return " / ".join(f"{shares[split]['rate']:.2%}" for split in ("train", "dev", "test") if split in shares)


def deciding(config: dict, table: str, task: str, evidence: TaskEvidence) -> str:
    """Whether `task` can tell objectives apart at this scale: which pretrained arms of the
    table beat both the `none` control and the task's trivial baseline (`TRIVIAL`) beyond the
    noise. A trivial baseline with no defined score (a constant has no correlation) is no bar."""
    runs, spec = config["runs"], config["tasks"][task]
    none = control_run(config, table, spec["modality"])
    arms = [r for r in config["tables"][table]["runs"]
            if runs[r]["modality"] == spec["modality"] and pretrains(config, r)]
    trivial = TRIVIAL[spec["kind"]]
    if none is None or not arms:
        return "not checked (the table has no `none` control or no pretrained run of this modality)"
    outcomes, why_not = [], []
    for run in arms:
        against = {"`none`": evidence.compare_runs(run, none), trivial: evidence.compare_to_baseline(run, trivial)}
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
