"""Which arms of a workspace's tables learned: every pretrained run a table of the active profile
shows, with how far below its corpus's unigram loss it ended, in nats, on pretraining's validation
masks (`unigram_gap`) and, where its analysis ran, on the masks its own objective draws (the
entropy record's fully masked tokens; the measure table2 and table3 print), and whether either is
under `verdicts.learned_gap`. The accounting behind docs/learning-failures.md.

    cd <a workspace> && PYTHONPATH=<repo>/src python <repo>/benchmarks/learning_table.py
"""

from __future__ import annotations

from pathlib import Path

from maskbench.config import load_params, pretraining_runs
from maskbench.report import markdown
from maskbench.report.analysis import own_mask_gap, read_measure
from maskbench.report.cells import pretrain_metrics
from maskbench.report.missing import Missing


def gap_text(gap: float | Missing, learned: float) -> str:
    if isinstance(gap, Missing):
        return "not measured"
    return f"{gap:.2f}" + (" (plateau)" if gap < learned else "")


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
            validation = metrics["unigram_gap"] if isinstance(metrics, dict) else metrics
            own = own_mask_gap(instance, read_measure(root, instance, "entropy"), metrics)
            rows.append([f"`{instance}`", config["runs"][run]["objective"], ", ".join(shown_in),
                         "not built" if isinstance(metrics, Missing) else gap_text(validation, learned),
                         gap_text(own, learned)])
    print(f"Profile `{config['profile']}`: nats below the unigram loss; (plateau): under {learned}. AR and DAR "
          "score their own next-token loss.\n")
    print("\n".join(markdown.table(["run", "objective", "tables", "validation masks", "own masks (analysis)"], rows)))


if __name__ == "__main__":
    main()
