"""What each job's outputs were built from, recorded by the job itself, whichever tool ran it.

Snakemake and DVC each keep their own memory of a build: DVC the hashes in dvc.lock, Snakemake
the times of files and, in `.snakemake/metadata`, the checksums of the inputs its own last run
of a job read. A job DVC re-ran was therefore still "built" for Snakemake with the inputs of
Snakemake's last run: edit `lr`, `dvc repro`, undo the edit, and the parameter record is back
to the checksum Snakemake remembers, so it called the table DVC built with the edit up to date.

So every `maskbench <stage>` command writes, as it finishes, a stamp (`paths.BUILT_STAMP`) of
what it read: the hash of its parameters' record (`maskbench.job_params`), of its stage's code
record, and the build id of each job whose outputs it read; at its start it replaces the stamp
by a "building" one, so a job killed half-way is not taken for built. When Snakemake reads the
Snakefile, `write_stale_marks` compares each job's stamp with what the job would read today
and writes the verdict to the job's stale mark (`paths.STALE_MARK`), one of its inputs:

- up to date: `{"stale": []}`, dated the oldest time, so it never makes the job newer-than-input;
- stale: the reasons and the time they were found, dated now: an input newer than the outputs
  whose checksum Snakemake has never seen, so the job re-runs, and after it what reads it.

A job without a stamp (never built, or built before stamps existed) is judged by Snakemake's own
rules alone. DVC needs none of this to decide (it compares hashes of what is on disk with
dvc.lock), but the stamp is an output of each DVC stage (maskbench.dvc_yaml): a stage whose deps
are dvc.lock's again is not run but restored from DVC's cache, `--no-run-cache` or not, and the
stamp of that build must come back with its outputs, or Snakemake re-runs what DVC restored.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path

from maskbench import paths
from maskbench.io import write_text
from maskbench.job_params import code_hashes, record_path, record_text, values, write_record
from maskbench.stages import STAGES, all_jobs


def job_name(stage: str, w: dict) -> str:
    return STAGES[stage].job_name(w)


def stamp_path(stage: str, w: dict) -> str:
    return paths.BUILT_STAMP.format(job=job_name(stage, w))


def stale_path(stage: str, w: dict) -> str:
    return paths.STALE_MARK.format(job=job_name(stage, w))


def _digest(record: dict) -> str:
    return hashlib.sha256(record_text(record).encode()).hexdigest()


def makers(config: dict) -> dict[str, str]:
    """The job that writes each output path of the profile, by path."""
    return {path: job.stage.job_name(job.wildcards) for job in all_jobs(config) for path in job.output.values()}


def _read_stamp(root: Path, job: str) -> dict | None:
    try:
        return json.loads((root / paths.BUILT_STAMP.format(job=job)).read_text())
    except (FileNotFoundError, ValueError):
        return None


def source(config: dict, stage: str, w: dict, made_by: dict[str, str], code: dict[str, str],
           root: Path = Path(".")) -> dict:
    """What the job reads today: its parameters' and its code's hashes, and the build of each
    job whose outputs it reads (None where that job has no stamp). `code` is the code digest of
    every stage kind asked for so far (`code_digest`)."""
    inputs = STAGES[stage].inputs(config, w)
    upstream = sorted({made_by[p] for value in inputs.values() for p in ([value] if isinstance(value, str) else value)
                       if p in made_by})
    return {"params": _digest(values(config, stage, w)), "code": code_digest(stage, code),
            "inputs": {job: (_read_stamp(root, job) or {}).get("build") for job in upstream}}


def code_digest(stage: str, cache: dict[str, str]) -> str:
    if stage not in cache:
        cache[stage] = _digest(code_hashes(stage))
    return cache[stage]


def start(config: dict, stage: str, w: dict, root: Path = Path(".")) -> dict:
    """Mark the job as building (a kill leaves it so) and return what it reads, for `finish`.
    Its parameter record is rewritten first where it holds other values (Snakemake's, from
    before an edit was undone, which DVC's validate stage, its params.yaml back to dvc.lock's,
    does not rewrite): DVC then records the values the job ran with."""
    write_record(root / record_path(stage, w), values(config, stage, w))
    read = source(config, stage, w, makers(config), {}, root)
    write_text(root / stamp_path(stage, w),
               json.dumps({"building": True, "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}) + "\n")
    return read


def finish(stage: str, w: dict, read: dict, root: Path = Path(".")) -> None:
    """Stamp the job built from `read`, with a new build id that the jobs reading it record."""
    write_text(root / stamp_path(stage, w), json.dumps({**read, "build": uuid.uuid4().hex}, indent=1) + "\n")


def stale_reasons(stamp: dict | None, today: dict) -> list[str]:
    """Why outputs built as `stamp` says are not those of today's job (none: up to date)."""
    if stamp is None:
        return []
    if stamp.get("building"):
        return [f"a run of it started {stamp.get('started')} (pid {stamp.get('pid')}) did not finish"]
    reasons = [f"its {what} changed since it was built" for what in ("params", "code")
               if stamp.get(what) != today[what]]
    built_with = stamp.get("inputs", {})
    reasons += [f"{job} was rebuilt since" for job, build in today["inputs"].items() if built_with.get(job) != build]
    return reasons


def write_stale_marks(config: dict, root: Path = Path(".")) -> list[str]:
    """Each job's verdict (see the module's docstring), rewritten only where it changed (a
    stale one always: a new time makes it a checksum Snakemake has not recorded); return the
    jobs found stale."""
    made_by, code, stale = makers(config), {}, []
    for name, kind in STAGES.items():
        for w in kind.jobs(config):
            job = kind.job_name(w)
            reasons = stale_reasons(_read_stamp(root, job), source(config, name, w, made_by, code, root))
            path = root / stale_path(name, w)
            if reasons:
                stale.append(job)
                write_text(path, json.dumps({"stale": reasons, "found": time.time_ns()}, indent=1) + "\n")
            elif not path.exists() or json.loads(path.read_text()).get("stale"):
                write_text(path, json.dumps({"stale": []}) + "\n")
                os.utime(path, (0, 0))
    return stale
