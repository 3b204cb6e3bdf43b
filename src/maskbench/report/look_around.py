"""table7: Look Around's two experiments.

- Classification (Look Around Tab. 2): the table's runs fine-tuned on its tasks, as table1 (score
  ± std over seeds, † where a run is not better than the `none` control beyond the noise), with
  the paper's AR and diversity-enhanced AR (DAR) numbers beside ours where a column's dataset is
  the benchmark they measured.
- Generation (Tab. 7): each run's `generation_perplexity` on held-out text
  (`maskbench.analysis.perplexity`, runs/perplexity/{run}/metrics.json), beside the paper's.

Claims (published.yaml, `decided_by: look_around`) name two objectives, `better` and `than`, and
a `measure`: `finetune` decides by table1's rule over the table's tasks; `generation_perplexity`
decides on the two runs' per-block mean negative log-likelihoods, paired (both runs score the
same held-out blocks): the claim holds when the interval of the mean paired difference favours
`better`, does not hold when it favours `than`, and is not decided otherwise. Its variance is the
blocks' (std of the differences over blocks / √blocks; blocks, not tokens, are the unit: the
tokens of one block are not independent) plus, each run being one pretraining run of its recipe,
the spread between pretraining seeds noise.yaml declares for the generation NLL on the corpus
(`eval.verdict.compare_measured`); without one the claim is not decided.

Where the table holds several runs of `than` (Tab. 7's fixed-ratio MLM at 0.15 and at 0.3, the
ends of variable-length MLM's range), `better` is compared with each and the claim is decided
against all of them (`against_every`): it holds only if it holds against every one, since
beating 0.15 alone cannot tell "variable length helps" from "a higher mask ratio helps".
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from maskbench import paths
from maskbench.config import mlm_mask_ratio, position_scheme, pretrained
from maskbench.eval.verdict import A_BETTER, B_BETTER, compare_measured
from maskbench.io import reading
from maskbench.power import declared_measure_spread
from maskbench.report import markdown
from maskbench.report.cells import LEARNING, baseline_rows, learning_cell
from maskbench.report.footer import closing_lines
from maskbench.report.knobs import knobs_text
from maskbench.report.missing import Missing
from maskbench.report.published import (OUTCOMES, Rendered, benchmark_of, claim_of, claims_decided_by, decide,
                                        load_published)
from maskbench.report.table import TASKS, Table, TableKind, read_table

CARD = TableKind(
    name="look_around", label="Look Around",
    columns=("run", "objective", "knobs", "positions", TASKS, "generation perplexity (held-out text)", LEARNING),
    caption=("Profile `{profile}`. Left: fine-tuning scores in % (RMSE as is) over seeds as each column "
             "says, {did_not_learn} where not better than the `none` control beyond the noise, `paper` the "
             "{citation} number where the column is its "
             "benchmark. Right: generation perplexity, exp of the mean negative log-likelihood of every token of "
             "the first {blocks} validation blocks of the run's corpus given "
             "the tokens before it (Look Around Eq. 2; a masked model reads \"prefix [MASK]\"); not the "
             "pretraining loss's valid perplexity."),
    claims="Claims of Look Around, checked on our rows:")


def read_perplexity(root: Path, run: str) -> dict | Missing:
    """The run's generation perplexity record where it applies, or the words its cell shows."""
    path = root / paths.GENERATION_PERPLEXITY.format(run=run)
    if not path.exists():
        return Missing(f"not computed (no {paths.GENERATION_PERPLEXITY.format(run=run)})")
    with reading(path):
        found = json.loads(path.read_text())
    return found if found.get("applies") else Missing(f"does not apply ({found.get('why', 'no reason given')})")


def perplexity_cell(found: dict | Missing) -> str:
    if isinstance(found, Missing):
        return str(found)
    return (f"{found['generation_perplexity']:.2f} (NLL {found['nll_nats']:.3f} ± {found['nll_std']:.3f} nats, "
            f"{found['tokens']:,} tokens)")


def published_classification(config: dict, objective: str, task: str) -> str | None:
    """Look Around Tab. 2's number for the objective on the task's benchmark, or None."""
    row = load_published()["look_around"]["classification"]["rows"].get(objective, {})
    value = row.get(benchmark_of(config, task) or "")
    if value is None:
        return None
    return " / ".join(f"{v:.1f}" for v in (value if isinstance(value, list) else [value]))


def perplexity_verdict(config: dict, better: str, than: str, measured: dict) -> str:
    """`better` has the lower generation perplexity beyond the noise (module docstring)."""
    found = [measured[r] for r in (better, than)]
    problem = next((f for f in found if isinstance(f, Missing)), None)
    if problem:
        return f"not computed: {problem}"
    a, b = found
    if len(a["block_nll"]) != len(b["block_nll"]) or len(a["block_nll"]) < 2:
        return (f"not computed: `{better}` and `{than}` scored {len(a['block_nll'])} and {len(b['block_nll'])} "
                "held-out blocks; a paired comparison needs the same blocks, two at least")
    gaps = np.asarray(b["block_nll"]) - np.asarray(a["block_nll"])  # positive: `better` predicts better
    measure = claim_of("varlen_mlm_generates_better")["noise_measure"]
    spreads = [declared_measure_spread(config, measure, run) for run in (better, than)]
    decided = compare_measured(float(gaps.mean()), float(gaps.var(ddof=1)) / len(gaps), spreads,
                               config["verdicts"]["confidence"])
    outcome = {A_BETTER: "holds", B_BETTER: "does not hold"}.get(decided.outcome, "not decided")
    noise = (f"not decided whatever the gap ({decided.why}): the blocks' noise alone would read two runs as two recipes"
             if decided.why else
             f"{100 * config['verdicts']['confidence']:g} % interval [{decided.low:+.4f}, {decided.high:+.4f}]: the "
             f"blocks' standard error and, each run being one pretraining run, the declared pretraining spread "
             f"({decided.noise}), Student's t on {decided.df:.1f} degrees of freedom")
    return (f"{outcome}: generation perplexity `{better}` {a['generation_perplexity']:.2f} against `{than}` "
            f"{b['generation_perplexity']:.2f} (mean NLL difference over {len(gaps)} paired blocks "
            f"{decided.difference:+.4f} nats; {noise})")


def against_every(verdicts: dict[str, str]) -> str:
    """One verdict from `better`'s verdict against each of several runs (label -> verdict text):
    does not hold when it does not against some run, holds when it holds against every one,
    not computed when one is missing, and not decided otherwise (a mixed or undecided pair)."""
    outcomes = [next(o for o in OUTCOMES if text.startswith(o)) for text in verdicts.values()]
    outcome = ("does not hold" if "does not hold" in outcomes else
               "holds" if all(o == "holds" for o in outcomes) else
               "not computed" if "not computed" in outcomes else "not decided")
    return (f"{outcome}: decided against each of {len(verdicts)} runs, holding only if it holds against every one; "
            + "; ".join(f"against {arm}: {text}" for arm, text in verdicts.items()))


def claim_verdict(config: dict, table: str, claim: dict, evidence: dict, measured: dict) -> str:
    runs = config["runs"]

    def run_of(objective: str) -> list[str]:
        return [r for r in config["tables"][table]["runs"] if runs[r]["objective"] == objective]

    def against(better: str, than: str) -> str:
        if claim["measure"] == "generation_perplexity":
            return perplexity_verdict(config, better, than, measured)
        return decide(config, table, better, than, evidence, claim)

    better, than = run_of(claim["better"]), run_of(claim["than"])
    if len(better) != 1 or not than:
        return (f"not checked: needs one run of `{claim['better']}` and at least one of `{claim['than']}` in this "
                f"table (found {markdown.names(better)} and {markdown.names(than)})")
    if len(than) == 1:
        return against(better[0], than[0])
    return against_every({arm_label(runs[run], run): against(better[0], run) for run in than})


def arm_label(spec: dict, run: str) -> str:
    """The run's name, and its mask ratio for a fixed-ratio MLM arm."""
    return f"`{run}` (mask ratio {mlm_mask_ratio(spec)})" if spec["objective"] == "mlm" else f"`{run}`"


def render(config: dict, table: str, root: Path, figures: Path | None = None) -> Rendered:
    """The table's markdown and its verdict on each claim of published.yaml decided by
    `look_around` (a `Verdict` whose text starts with one of `published.OUTCOMES`)."""
    found, runs = read_table(config, table, root), config["runs"]
    measured = {r: read_perplexity(root, r) for r in pretrained(config, found.spec["runs"])}
    body = [row_cells(found, run, measured) for run in found.spec["runs"]]
    body += [[label, "—", "—", "—", *scores, "—", "—"]  # no objective, knobs, positions, perplexity, pretraining
             for label, *scores in baseline_rows(config, table, root)]
    published = load_published()["look_around"]
    lines = [*found.opening(CARD, citation=published["classification"]["citation"],
                            blocks=config["generation_perplexity"]["blocks"]),
             *markdown.table(found.header(CARD), body)]
    lines += ["", f"{published['generation']['citation']}, for scale (their models, corpora and size):", ""]
    lines += [f"- {r['label']}: " + ", ".join(f"{k} {v:.1f}" for k, v in r["perplexity"].items())
              for r in published["generation"]["rows"]]
    verdicts = [found.verdict(c["id"], claim_verdict(config, table, c, found.evidence, measured),
                              [r for r in found.spec["runs"] if runs[r]["objective"] in (c["better"], c["than"])])
                for c in claims_decided_by(CARD.name)]
    lines += closing_lines(config, table, root, figures, CARD.claims, verdicts)
    return Rendered("\n".join(lines), verdicts)


def row_cells(found: Table, run: str, measured: dict) -> list[str]:
    """A run's row: each task's cell with the paper's number beside it, its generation
    perplexity ("—" for a `none` run, which generates nothing), its pretraining."""
    config, objective = found.config, found.config["runs"][run]["objective"]
    papers = {t: published_classification(config, objective, t) for t in found.spec["tasks"]}
    return [found.run_name(run), objective, knobs_text(config, run), position_scheme(config, run),
            *(found.task_cell(run, t, after="" if papers[t] is None else f" (paper {papers[t]})") for t in papers),
            "—" if run not in measured else perplexity_cell(measured[run]), learning_cell(config, found.root, run)]
