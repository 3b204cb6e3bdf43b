"""The params.yaml values each job reads, recorded in one small file per job
(`logs/params/<job>.json`) that is an input of the job in both Snakemake and DVC.

Snakemake and DVC each kept their own record of a job's parameters (Snakemake in
`.snakemake/metadata`, DVC in `dvc.lock`), so a job one tool re-ran after a parameter change
was planned again by the other. With the record as an input, both decide on the same file:
DVC by its hash, Snakemake by its time (a record is rewritten only when its values change, so
its time is when they last changed). Snakemake writes the records when it reads the Snakefile,
DVC in its first stage (`maskbench validate --stamp`), before any job of either runs.

A record written for the first time gets the oldest time there is: a job already built counts
as built with the parameters recorded now, as DVC (which compares hashes) also sees it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from maskbench import paths
from maskbench.config import lookup
from maskbench.io import write_text
from maskbench.stages import STAGES


def values(config: dict, stage: str, wildcards: dict) -> dict:
    """The values of the params.yaml keys one job reads (`Stage.params`), by key."""
    return {key: lookup(config, key) for key in STAGES[stage].params(config, wildcards)}


def record_path(stage: str, wildcards: dict) -> str:
    return paths.PARAMS_RECORD.format(job=STAGES[stage].job_name(wildcards))


def write_records(config: dict, root: Path = Path(".")) -> list[str]:
    """Write the record of every job of the parameters whose values changed (or that has none);
    return the paths written."""
    written = []
    for name, stage in STAGES.items():
        for w in stage.jobs(config):
            path = root / record_path(name, w)
            text = json.dumps(values(config, name, w), sort_keys=True, indent=1, default=str) + "\n"
            new = not path.exists()
            if not new and path.read_text() == text:
                continue
            write_text(path, text)
            if new:
                os.utime(path, (0, 0))
            written.append(str(path.relative_to(root)))
    return written
