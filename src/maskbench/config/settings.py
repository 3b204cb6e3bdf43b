"""The settings a job runs with, resolved from params.yaml: a run's pretraining settings (its
overrides over `pretrain`), its position scheme, pretraining seeds and their runs, processes
and accumulation, a task's fine-tuning settings, grid and seeds.
"""

from __future__ import annotations

import copy
import math

from maskbench.model.schemes import scheme_for


def corpus_datasets(config: dict, modality: str) -> list[str]:
    """The dataset(s) a modality pretrains on: `corpora.<modality>` is one name or a list."""
    names = config["corpora"][modality]
    return [names] if isinstance(names, str) else list(names)


# Pretraining settings that change where and how a run computes, not what it computes (up to
# the order of floating-point sums): a checkpoint resumes across them (maskbench.train.fingerprint)
# and a comparison's arms may differ in them (maskbench.config.tables.differences).
PRETRAIN_OPERATIONAL = ("threads", "device", "compile", "log_every", "eval_every", "checkpoint_every",
                        "micro_batch_size")


def run_settings(config: dict, run: str) -> dict:
    """Pretraining settings for one run: shared defaults, then the run's overrides, with the
    run's own pretraining `seed` in place of the list of `seeds` (`pretraining_runs`)."""
    settings = {**config["pretrain"], **config["runs"][run].get("overrides", {})}
    del settings["seeds"]
    return {**settings, "seed": config["runs"][run].get("pretraining_seed", 0)}


# Seed s > 0 of run R is the run R-pseed<s>; seed 0 keeps R's name, so one-seed results keep
# their paths and adding seeds re-trains nothing.
SEED_MARK = "-pseed"


def seed_run(run: str, seed: int) -> str:
    """The name of pretraining seed `seed` of the declared run `run`."""
    return run if seed == 0 else f"{run}{SEED_MARK}{seed}"


def pretraining_runs(config: dict, run: str) -> list[str]:
    """The pretrained instances of a declared run, one per seed of its `seeds` (pretrain.seeds,
    or the run's overrides), in that order: what its table row reads."""
    return [seed_run(run, seed) for seed in pretraining_seeds(config, run)]


def pretraining_seeds(config: dict, run: str) -> list[int]:
    """A declared run's pretraining seeds: its overrides' `seeds`, else pretrain.seeds."""
    return {**config["pretrain"], **config["runs"][run].get("overrides", {})}["seeds"]


def declared_run(config: dict, run: str) -> str:
    """The run of params.yaml that a pretrained instance (`mlm-pseed1`) is a seed of."""
    return config["runs"][run].get("seed_of", run)


def declared_runs(config: dict) -> list[str]:
    """The runs params.yaml declares (not their seed instances), sorted."""
    return sorted(run for run, spec in config["runs"].items() if "seed_of" not in spec)


def add_pretraining_seeds(config: dict) -> dict:
    """`config` with every declared run's seed instances under `runs` (`mlm-pseed1`: `mlm`'s
    entry, marked `seed_of` and `pretraining_seed`), so every stage reads an instance's spec,
    settings and paths as a run's. Tables keep listing declared runs."""
    instances = {}
    for run, spec in config["runs"].items():
        for seed, name in zip(pretraining_seeds(config, run), pretraining_runs(config, run)):
            if seed:
                instances[name] = {**copy.deepcopy(spec), "seed_of": run, "pretraining_seed": seed}
    return {**config, "runs": {**config["runs"], **instances}}


def instance_cells(config: dict, cells: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (pretrained instance, task) pairs behind table cells of declared runs."""
    return [(instance, task) for run, task in cells for instance in pretraining_runs(config, run)]


def computes_in_bf16(precision: str, cuda: bool) -> bool:
    """The precision policy (maskbench.device), without torch: a model's forward passes run
    under bfloat16 autocast where `precision` is bf16, or auto on a CUDA device."""
    return precision == "bf16" or (precision == "auto" and cuda)


def launch_settings(config: dict, run: str) -> dict:
    """How many processes train `run`: `gpus` per node on `nodes` machines (params.yaml
    `launch`, then `launch.runs.<run>`). Scheduling only: it never changes what a run computes."""
    launch = config["launch"]
    return {"gpus": launch["gpus"], "nodes": launch["nodes"],
            **launch.get("runs", {}).get(declared_run(config, run), {})}


def accumulation(settings: dict, processes: int) -> int:
    """Micro-batches each of `processes` runs per optimizer step so that together they make
    the global batch: batch_size / (micro_batch_size x processes); ValueError where that is
    not a whole number, naming the micro-batch sizes that would divide it."""
    batch, micro = settings["batch_size"], settings["micro_batch_size"]
    if batch % (micro * processes):
        fits = [m for m in range(1, batch // processes + 1)
                if batch % (m * processes) == 0] if batch % processes == 0 else []
        expected = (f"expected micro_batch_size one of {fits[-6:]}" if fits
                    else f"no micro-batch divides it: choose a number of processes that divides {batch}")
        raise ValueError(f"batch_size {batch} is not micro_batch_size {micro} x {processes} process(es) x a whole "
                         f"number of accumulation steps; {expected}")
    return batch // (micro * processes)


def position_scheme(config: dict, run: str) -> str:
    """The `EncoderConfig.position_scheme` a run's encoder gets (the report prints it per row):
    the run's `positions` setting, as its objective uses it (`maskbench.model.schemes`). The
    papers' own, unequal, schemes are runs of their own (`mlm_paper`, `mae_lm_paper`)."""
    spec = config["runs"][run]
    return scheme_for(spec["objective"], spec.get("knobs", {}), run_settings(config, run)["positions"])


def task_grid(config: dict, task: str) -> dict[str, list]:
    """The fine-tuning grid of a task: its own `grid`, else `finetune.grid` ({} = one point)."""
    return config["tasks"][task].get("grid", config["finetune"].get("grid", {}))


def grid_size(config: dict, task: str) -> int:
    return math.prod(len(values) for values in task_grid(config, task).values())


# Where a task's fine-tuning settings come from, in the order they apply (later wins).
FINETUNE_SETTINGS_SOURCES = ("finetune.settings", "tasks.{task}.overrides", "finetune.settings_over_tasks")


def finetune_settings(config: dict, task: str) -> dict:
    """Fine-tuning settings for one task: shared defaults, then the task's overrides, then
    `finetune.settings_over_tasks`, so that a profile can bound every task (smoke: one short
    epoch) without restating each task's overrides."""
    return {**config["finetune"]["settings"], **config["tasks"][task].get("overrides", {}),
            **config["finetune"].get("settings_over_tasks", {})}


def task_seeds(config: dict, task: str) -> list[int]:
    """Fine-tuning seeds of a task: its own `seeds`, else `finetune.seeds` (the papers use five
    for GLUE and SQuAD, three for MoleculeNet)."""
    return config["tasks"][task].get("seeds", config["finetune"]["seeds"])
