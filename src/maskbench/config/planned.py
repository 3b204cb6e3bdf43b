"""The parameters a build was planned with, so that a job run after params.yaml changed refuses.

Snakemake reads params.yaml once, when it plans the jobs, and each job's `maskbench` command
reads it again when it starts. An edit in between (a build of an hour, a user trying the next
setting) would otherwise run the job on parameters its inputs were not built with: a table
stamped with 40 pretraining steps whose models trained 30. The Snakefile therefore saves the
resolved parameters it planned with (`record_plan`, `.snakemake/maskbench/planned/<hash>.json`)
and hands each job the file (in MASKBENCH_PLANNED, or `--planned`); the job compares the keys it reads (the report,
which
stamps the hash of all of them, every key) and refuses, naming each key that changed.
"""

from __future__ import annotations

import json
from pathlib import Path

from maskbench.config.load import ParamsError, _dotted, params_hash
from maskbench.io import write_json

PLANNED_DIR = Path(".snakemake/maskbench/planned")
PLANNED_ENV = "MASKBENCH_PLANNED"  # how the Snakefile hands a job the file (the command stays the same)
MISSING = "(not set)"
SHOWN = 20  # keys named in one error; the rest are counted


def record_plan(config: dict, root: Path = Path(".")) -> Path:
    """Save the resolved parameters under their hash (once per distinct set); the path, relative to `root`."""
    path = PLANNED_DIR / f"{params_hash(config)}.json"
    if not (root / path).exists():
        write_json(root / path, config)
    return path


def _values(config: dict, keys: list[str] | None) -> dict:
    """The dotted leaf values of `keys` (all of them if None); a key a side lacks reads as missing."""
    flat = _dotted(config)
    if keys is None:
        return flat
    return {leaf: value for leaf, value in flat.items()
            if any(leaf == key or leaf.startswith(f"{key}.") for key in keys)}


def changed_keys(planned: dict, now: dict, keys: list[str] | None = None) -> dict[str, tuple]:
    """Each dotted key among `keys` (every key if None) whose value differs: (planned, now)."""
    before, after = _values(planned, keys), _values(now, keys)
    return {key: (before.get(key, MISSING), after.get(key, MISSING))
            for key in sorted(before.keys() | after.keys()) if before.get(key, MISSING) != after.get(key, MISSING)}


def require_plan(plan_path: Path, config: dict, keys: list[str] | None, job: str, params_path: str) -> None:
    """Refuse `job` when the keys it reads changed in `params_path` since the build was planned."""
    try:
        planned = json.loads(Path(plan_path).read_text())
    except (OSError, ValueError) as exc:
        raise ParamsError(f"{plan_path}: the parameters this build was planned with cannot be read ({exc}); "
                          "re-run snakemake, which plans again") from None
    changed = changed_keys(planned, json.loads(json.dumps(config, default=str)), keys)
    if not changed:
        return
    lines = [f"{key}: {old!r} -> {new!r}" for key, (old, new) in list(changed.items())[:SHOWN]]
    if len(changed) > SHOWN:
        lines.append(f"... and {len(changed) - SHOWN} more")
    raise ParamsError(f"{params_path} changed since this build was planned (params hash {params_hash(planned)} -> "
                      f"{params_hash(config)}), in keys `{job}` reads:\n  " + "\n  ".join(lines) + "\nThe job did "
                      "not start, and nothing was written. Let the running build finish (or stop it), then run "
                      "snakemake again: it plans the jobs whose parameters changed anew.")
