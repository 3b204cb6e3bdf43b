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


# The profile chosen on this checkout (`maskbench profile NAME`), beside params.yaml and not in
# git: switching profile leaves every tracked file as it was, so a table's footer names a clean
# commit. Without it, params.yaml's own `profile:` (the default, `tiny`) is the active one.
PROFILE_FILE = "profile.yaml"


def profile_file(path: Path | str = "params.yaml") -> Path:
    return Path(path).with_name(PROFILE_FILE)


def chosen_profile(path: Path | str = "params.yaml") -> str | None:
    """The profile `maskbench profile` chose for the params.yaml at `path`, or None."""
    local = profile_file(path)
    if not local.exists():
        return None
    chosen = read_yaml(local)
    if set(chosen) != {"profile"} or not isinstance(chosen["profile"], str):
        raise ParamsError(f"{local}: expected one line `profile: NAME` (as `maskbench profile NAME` writes it)")
    return chosen["profile"]


def profile_source(path: Path | str = "params.yaml") -> Path:
    """The file that decides the active profile: `PROFILE_FILE` once `maskbench profile` wrote
    it, else params.yaml itself (dvc.yaml's first stage reads the profile from it)."""
    local = profile_file(path)
    return local if local.exists() else Path(path)


def profile_override(path: Path | str = "params.yaml") -> str | None:
    """A line saying that `PROFILE_FILE` overrides params.yaml's own `profile:`, when the two
    differ: an edit of `profile:` in params.yaml has no effect until `maskbench profile`."""
    chosen, default = chosen_profile(path), read_yaml(Path(path)).get("profile")
    if chosen is None or chosen == default:
        return None
    return (f"profile `{chosen}` (chosen in {profile_file(path)}); {path}'s `profile: {default}` is overridden: "
            f"switch with `maskbench profile NAME`, not by editing {path}")


def read_params(path: Path | str = "params.yaml", every_profile: bool = False) -> tuple[dict, dict]:
    """params.yaml as written, with the chosen profile (`PROFILE_FILE`) as its `profile`, and the
    active profile's parameters, validated (the active profile only, unless `every_profile`);
    raises ParamsError naming every bad key."""
    path = Path(path)
    raw = read_yaml(path)
    if chosen := chosen_profile(path):
        raw["profile"] = chosen
    return raw, validate(raw, read_yaml(schema_path()), path, every_profile)


def switch_profile(path: Path | str, name: str) -> tuple[dict, dict]:
    """The parameters with profile `name` (raw, validated), for `maskbench profile` to write
    `PROFILE_FILE` once they are valid; raises ParamsError for an unknown profile."""
    path = Path(path)
    raw = read_yaml(path)
    if name not in raw.get("profiles", {}):
        raise ParamsError(f"{path}: profiles.{name} is not defined; expected one of {sorted(raw.get('profiles', {}))}")
    raw["profile"] = name
    return raw, validate(raw, read_yaml(schema_path()), path, False)


def load_params(path: Path | str = "params.yaml") -> dict:
    """The active profile's parameters, validated: what every stage reads, once per process."""
    return read_params(path)[1]
