"""params.yaml: read, merged with the active profile, checked, and asked for settings.

    config = load_params()              # what every stage reads, once per process

The package is split by job; every name below is importable from `maskbench.config`:
- `load`: the file, the profile merged over it (`resolve_profile`), where a key was set;
- `checks`: `validate`, the JSON Schema and the cross-references it cannot express, one line
  per problem naming the key and what is allowed;
- `settings`: what a job runs with (a run's pretraining settings and position scheme, its
  pretraining seeds, processes and accumulation; a task's fine-tuning settings, grid, seeds);
- `tables`: what the report tables are made of (kinds, cells, grid cells, ablation rows).

Every stage and the Snakefile read parameters through `load_params` / `read_params`, so a wrong
key, type or value fails the same way everywhere.
"""

from __future__ import annotations

from pathlib import Path

from maskbench.config.checks import ablation_errors, validate
from maskbench.config.load import (SAFE_LOADER, ParamsError, ReadLog, deep_merge, has_key, lookup, params_hash,
                                   read_yaml, resolve_profile,
                                   schema_path, snakemake_config_error)
from maskbench.config.settings import (FINETUNE_SETTINGS_SOURCES, SEED_MARK, accumulation, add_pretraining_seeds,
                                       computes_in_bf16, corpus_datasets, declared_run, declared_runs,
                                       finetune_settings, grid_size, instance_cells, launch_settings, position_scheme,
                                       pretraining_runs, pretraining_seeds, run_settings, seed_run,
                                       task_grid, task_seeds)
from maskbench.config.tables import (GRID_OBJECTIVES, analysis_finetune_task, differences, grid_arms, grid_cell,
                                     mlm_mask_ratio, pretrained, pretrains, rank_tables, resolved_run, run_label,
                                     run_tasks, table_cells, table_kind, table_rows, varlen_range)


def read_params(path: Path | str = "params.yaml", every_profile: bool = False) -> tuple[dict, dict]:
    """params.yaml as written and the active profile's parameters, validated (the active
    profile only, unless `every_profile`); raises ParamsError naming every bad key."""
    path = Path(path)
    raw = read_yaml(path)
    return raw, validate(raw, read_yaml(schema_path()), path, every_profile)


def switch_profile(path: Path | str, name: str) -> tuple[dict, dict, str]:
    """params.yaml with its top-level `profile:` line set to `name` (nothing else of the text
    changed, comments kept): (raw, validated parameters, new text), not yet written; raises
    ParamsError for an unknown profile or a file without that line."""
    import re

    import yaml

    path = Path(path)
    raw = read_yaml(path)
    if name not in raw.get("profiles", {}):
        raise ParamsError(f"{path}: profiles.{name} is not defined; expected one of {sorted(raw.get('profiles', {}))}")
    text, count = re.subn(r"^profile:[ \t]*[^\s#]*", f"profile: {name}", path.read_text(), count=1, flags=re.M)
    if not count:
        raise ParamsError(f"{path}: no top-level `profile:` line to switch (add `profile: {name}` as its first key)")
    raw = yaml.load(text, Loader=SAFE_LOADER)
    return raw, validate(raw, read_yaml(schema_path()), path, False), text


def load_params(path: Path | str = "params.yaml") -> dict:
    """The active profile's parameters, validated: what every stage reads, once per process."""
    return read_params(path)[1]
