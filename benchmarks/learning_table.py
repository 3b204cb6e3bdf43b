"""Which arms of a workspace's tables learned: every pretrained run a table of the active profile
shows, with how far below its corpus's unigram loss it ended, in nats, on pretraining's validation
masks (`learned_gap`: `unigram_gap` with ExLM's recorded transition floor added back) and, where its analysis ran, on
the masks its own objective draws (the
entropy record's fully masked tokens; the measure table2 and table3 print), and whether either is
under `verdicts.learned_gap`. An ExLM run with a DAG is read on its own masks by the DAG's loss
against the unigram loss plus the DAG's `transition_floor` (the alignment record): what a state
emitting token frequencies would score under the run's transitions, which for the uniform DAG
(`transitions: none`) is more than a nat above the unigram loss itself. The accounting behind
docs/learning-failures.md.

    cd <a workspace> && PYTHONPATH=<repo>/src python <repo>/benchmarks/learning_table.py
"""

from __future__ import annotations

from pathlib import Path

from maskbench.config import load_params, pretraining_runs
from maskbench.report import markdown
from maskbench.report.analysis import own_mask_gap, read_measure
from maskbench.report.cells import learned_gap, pretrain_metrics
from maskbench.report.missing import Missing


def gap_text(gap: float | Missing, learned: float) -> str:
    if isinstance(gap, Missing):
        return "not measured"
    return f"{gap:.2f}" + (" (plateau)" if gap < learned else "")


def own_masks_gap(config: dict, root: Path, instance: str, run: str, metrics: dict | Missing) -> float | Missing:
    """The run's gap on its own masks: the entropy record's for a token-per-position objective;
    for ExLM with a DAG, the alignment record's `dag_nll` under unigram loss + `transition_floor`
    (where the record has it, as `learned_gap` reads pretraining's)."""
    spec = config["runs"][run]
    if spec["objective"] == "exlm" and spec.get("knobs", {}).get("transitions") != "ctc":
        return own_mask_gap(instance, read_measure(root, instance, "alignment"), metrics, field="dag_nll")
    return own_mask_gap(instance, read_measure(root, instance, "entropy"), metrics)


def main() -> None:
    config, root = load_params(), Path(".")
    learned = config["verdicts"]["learned_gap"]
    tables = {}
    for table, spec in config["tables"].items():
        for run in spec["runs"]:
            if config["runs"][run]["objective"] != "none":
                tables.setdefault(run, []).append(table)
    rows = []
    for run, shown_in in tables.items():
        for instance in pretraining_runs(config, run):
            metrics = pretrain_metrics(root, instance)
            validation = learned_gap(metrics) if isinstance(metrics, dict) else metrics
            own = own_masks_gap(config, root, instance, run, metrics)
            rows.append([f"`{instance}`", config["runs"][run]["objective"], ", ".join(shown_in),
                         "not built" if isinstance(metrics, Missing) else gap_text(validation, learned),
                         gap_text(own, learned)])
    print(f"Profile `{config['profile']}`: nats below the unigram loss; (plateau): under {learned}. AR and DAR "
          "score their own next-token loss; ExLM's DAG on its own masks is read against the unigram loss "
          "plus the DAG's transition floor.\n")
    print("\n".join(markdown.table(["run", "objective", "tables", "validation masks", "own masks (analysis)"], rows)))


if __name__ == "__main__":
    main()
