"""What the report tables are made of, as params.yaml declares them: a table's kind, its cells
(run x task), the (k, p) cell of a grid run, the rows of an ablation table and what each row
changes against its base. Shared by validation, the workflow and the report renderers.
"""

from __future__ import annotations

from maskbench.config.settings import PRETRAIN_OPERATIONAL, run_settings
from maskbench.objectives.cards import run_card, run_knobs


def mlm_mask_ratio(run: dict) -> float:
    """An MLM run's mask ratio (`knobs.mask_ratio`; its card's default where left out)."""
    return run_knobs(run)["mask_ratio"]


def varlen_range(run: dict) -> tuple[float, float]:
    """A variable-length MLM run's mask-ratio range (its knobs; its card's defaults where left out)."""
    knobs = run_knobs(run)
    return knobs["mask_ratio_min"], knobs["mask_ratio_max"]


def pretrains(config: dict, run: str) -> bool:
    """Whether `run` is pretrained at all: False for the untrained control (`none`), whose
    encoder stays at its seeded initialisation (its objective's card)."""
    return run_card(config["runs"][run]).pretrains


def pretrained(config: dict, runs: list[str]) -> list[str]:
    """`runs` without the untrained controls, in order."""
    return [run for run in runs if pretrains(config, run)]


def run_label(config: dict, run: str) -> str:
    """How a table's row names a run: its name, or for a control what it is (its card's summary)."""
    return run if pretrains(config, run) else f"{run_card(config['runs'][run]).summary} (`{run}`)"


# The objectives whose runs fill each grid table's (k, p) cells (MLM is the k = 1 cell).
GRID_OBJECTIVES = {"repeated_mlm_grid": ("mlm", "repeated_mlm"), "exlm_grid": ("mlm", "exlm")}


def rank_tables(config: dict) -> list[str]:
    """The tables that show effective ranks (kind `effective_rank`, table6)."""
    return [t for t in config["tables"] if table_kind(config, t) == "effective_rank"]


def analysis_finetune_task(config: dict, run: str) -> str | None:
    """The task whose fine-tuned encoder the analysis of `run` measures the rank after
    fine-tuning of (MAE-LM Fig. 5b; `analysis.finetune_task` of its modality), or None: only the
    runs that a rank table shows keep one (`maskbench.stages.analysis_finetune_job`)."""
    if not any(run in config["tables"][t]["runs"] for t in rank_tables(config)):
        return None
    return config["analysis"].get("finetune_task", {}).get(config["runs"][run]["modality"])


def table_kind(config: dict, table: str) -> str:
    """How a table is laid out (`tables.<name>.kind`; table1's runs x tasks by default)."""
    return config["tables"][table].get("kind", "objectives")


def grid_cell(run: dict) -> tuple[int, float]:
    """The (k, p) of a grid arm: its knobs `k` (1 for an objective without one: MLM) and `mask_ratio`."""
    knobs = run.get("knobs", {})
    return (knobs["k"] if "k" in run_card(run).defaults else 1), knobs["mask_ratio"]


def grid_arms(config: dict, table: str) -> list[str]:
    """The runs of a grid table that fill its cells: all but the `none` control."""
    return pretrained(config, config["tables"][table]["runs"])


def resolved_run(config: dict, run: str) -> dict:
    """Everything that decides what a run learns, flat: modality, objective, each knob as
    `knobs.<knob>` and each pretraining setting (shared, then the run's overrides)."""
    spec = config["runs"][run]
    return {"modality": spec["modality"], "objective": spec["objective"],
            **{f"knobs.{k}": v for k, v in spec.get("knobs", {}).items()}, **run_settings(config, run)}


def differences(config: dict, run: str, base: str) -> list[str]:
    """The keys of `resolved_run` in which `run` and `base` differ, but for the operational
    settings (`PRETRAIN_OPERATIONAL`: a micro-batch that fits the GPU computes the same run)."""
    a, b = resolved_run(config, run), resolved_run(config, base)
    return sorted(key for key in {**a, **b} if a.get(key) != b.get(key) and key not in PRETRAIN_OPERATIONAL)


def table_rows(config: dict, table: str) -> dict[str, dict]:
    """An ablations table's rows by id, in order (a row a profile set to null left out)."""
    return {name: row for name, row in config["tables"][table]["rows"].items() if row is not None}


def run_tasks(config: dict, table: str, run: str) -> list[str]:
    """The tasks a table fine-tunes `run` on, in the table's order: its tasks, or where an
    ablations table's row of the run names its own (`rows.<row>.tasks`, the protocol of that
    row's paper: ExLM Tab. 2's rows fine-tuned as its Tab. 6 says), those. The controls, in no
    row, take every task, so each row's cells have their `none` cell beside them."""
    spec = config["tables"][table]
    declared = [row["tasks"] for row in table_rows(config, table).values()
                if row["run"] == run and "tasks" in row] if "rows" in spec else []
    return [t for t in spec["tasks"] if any(t in d for d in declared)] if declared else spec["tasks"]


def table_cells(config: dict, table: str) -> list[tuple[str, str]]:
    """(run, task) pairs a table shows: every run on every task of its modality that the table
    fine-tunes it on (`run_tasks`)."""
    spec, runs, tasks = config["tables"][table], config["runs"], config["tasks"]
    return [(run, task) for run in spec["runs"] for task in run_tasks(config, table, run)
            if runs[run]["modality"] == tasks[task]["modality"]]
