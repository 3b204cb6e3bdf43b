"""The params.yaml values each job reads, recorded in one small file per job
(`logs/params/<job>.json`) that is an input of the job in both Snakemake and DVC.

Snakemake and DVC each kept their own record of a job's parameters (Snakemake in
`.snakemake/metadata`, DVC in `dvc.lock`), so a job one tool re-ran after a parameter change
was planned again by the other. With the record as an input, both decide on the same file:
DVC by its hash, Snakemake by its time (a record is rewritten only when its values change, so
its time is when they last changed). Snakemake writes the records when it reads the Snakefile,
DVC in its first stage (`maskbench validate --stamp`), before any job of either runs.

The code a stage runs is recorded the same way, once per stage kind (`logs/code/<stage>.json`,
an input of each of its Snakemake jobs): the hash of every source file DVC hashes for the
stage (`maskbench.dvc_yaml.stage_code`, the command's imports, transitively), so that after a
change to `objectives/mlm.py` Snakemake re-runs the jobs whose code DVC sees changed, and
no other.

A record written for the first time gets the oldest time there is: a job already built counts
as built with the parameters (and code) recorded now, as DVC (which compares hashes) also sees it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from maskbench import paths
from maskbench.config import lookup
from maskbench.dvc_yaml import DATA_SUFFIXES, PACKAGE, stage_code
from maskbench.io import write_text
from maskbench.stages import STAGES


def values(config: dict, stage: str, wildcards: dict) -> dict:
    """The values of the params.yaml keys one job reads (`Stage.params`), by key."""
    return {key: lookup(config, key) for key in STAGES[stage].params(config, wildcards)}


def record_path(stage: str, wildcards: dict) -> str:
    return paths.PARAMS_RECORD.format(job=STAGES[stage].job_name(wildcards))


def code_hashes(stage: str) -> dict[str, str]:
    """The sha256 of every source file the stage's DVC entry hashes (a directory: its modules
    and data files), by path: what decides the stage's results besides its inputs and parameters."""
    checkout = PACKAGE.parents[1]  # stage_code names files as src/maskbench/...
    files = []
    for entry in stage_code(stage):
        path = checkout / entry
        files += sorted(f for f in path.rglob("*") if f.suffix in (".py", *DATA_SUFFIXES)) if path.is_dir() else [path]
    return {f.relative_to(checkout).as_posix(): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def code_record_path(stage: str) -> str:
    return paths.CODE_RECORD.format(stage=stage)


def record_text(record: dict) -> str:
    """A record as its file holds it: what DVC hashes, and `maskbench.built` too."""
    return json.dumps(record, sort_keys=True, indent=1, default=str) + "\n"


def write_record(path: Path, record: dict) -> bool:
    """Write `record` at `path` unless it holds it already; a new record dated the oldest time."""
    text = record_text(record)
    new = not path.exists()
    if not new and path.read_text() == text:
        return False
    write_text(path, text)
    if new:
        os.utime(path, (0, 0))
    return True


def write_code_records(root: Path = Path(".")) -> list[str]:
    """Write the code record of every stage kind whose code changed (or that has none); return
    the paths written."""
    return [code_record_path(name) for name in STAGES
            if write_record(root / code_record_path(name), code_hashes(name))]


def write_records(config: dict, root: Path = Path(".")) -> list[str]:
    """Write the record of every job of the parameters whose values changed (or that has none),
    and of every stage kind whose code changed; return the paths written."""
    written = write_code_records(root)
    for name, stage in STAGES.items():
        records = {record_path(name, w): values(config, name, w) for w in stage.jobs(config)}
        written += [path for path, record in records.items() if write_record(root / path, record)]
    return written
