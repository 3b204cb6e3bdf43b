# Parameters and helpers shared by the rules.
# Every stage runs a `maskbench` command that reads params.yaml itself, so values passed with
# `snakemake --config` would not reach it (nor DVC): refuse them and point at params.yaml.
import yaml

from maskbench import paths
from maskbench.config import finetune_settings, load_params, run_settings, table_cells

PARAMS = load_params("params.yaml")
if config != yaml.safe_load(open("params.yaml")):
    raise ValueError("edit params.yaml instead of passing --config/--configfile: the maskbench stages read params.yaml")

NAME = r"[A-Za-z][A-Za-z0-9_.-]*"


wildcard_constraints:
    dataset=NAME,
    task=NAME,
    run=NAME,
    table=r"table[0-9]+",
    modality="text|smiles",
    seed=r"[0-9]+",


def corpus_raw(modality):
    return paths.RAW.format(dataset=PARAMS["corpora"][modality])


def uses_gpu(device):
    return 1 if device == "cuda" else 0
