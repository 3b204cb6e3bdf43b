# Parameters and helpers shared by the rules.
# Every stage runs a `maskbench` command that reads params.yaml itself, so values passed with
# `snakemake --config` would not reach it (nor DVC): refuse them and point at params.yaml.
import yaml

from maskbench import paths
from maskbench.config import (corpus_datasets, finetune_settings, grid_size, load_params, lookup, run_settings,
                              stage_params, table_cells, task_seeds)

PARAMS = load_params("params.yaml")
if config != yaml.safe_load(open("params.yaml")):
    raise ValueError("edit params.yaml instead of passing --config/--configfile: the maskbench stages read params.yaml")

RESOURCES = PARAMS["resources"]  # what each rule asks a scheduler for
NAME = r"[A-Za-z][A-Za-z0-9_-]*"


wildcard_constraints:
    dataset=NAME,
    task=NAME,
    run=NAME,
    table=r"table[0-9]+",
    modality="text|smiles",
    seed=r"[0-9]+",


def corpus_raws(modality):
    """The raw directories of the dataset(s) a modality pretrains on."""
    return [paths.RAW.format(dataset=d) for d in corpus_datasets(PARAMS, modality)]


def reads(stage, name):
    """The params.yaml values a job reads (a change re-runs it): the keys dvc.yaml lists for the
    same stage, from the same function, so both tools re-run the same jobs."""
    return {key: lookup(PARAMS, key) for key in stage_params(PARAMS, stage, name)}


def data_products():
    """The data cards of every corpus and task in params.yaml (the `data` target)."""
    return [paths.TOKENS_CARD.format(modality=m) for m in PARAMS["corpora"]] + [
        paths.TASK_CARD.format(task=t) for t in PARAMS["tasks"]
    ]


def pretrained_models():
    """The encoder of every run in params.yaml (the `pretrained` target)."""
    return [paths.PRETRAIN_MODEL.format(run=r) for r in PARAMS["runs"]]


def uses_gpu(device):
    return 1 if device == "cuda" else 0
