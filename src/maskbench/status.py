"""`maskbench status`: what is left to build of the profile's reports, in a few lines.

`dvc status` lists every changed dependency of every stage (5,488 lines on a half-built smoke
tree) and `dvc repro --dry` stops at the first stage whose inputs are not built yet
(treeverse/dvc#9818: its run-cache lookup hashes them). This answers the common question from
the files and each job's stamp (`maskbench.built`), whichever tool built them: per stage, how
many of the jobs of dvc.yaml (what `snakemake --cores all reports` builds) are built, stale,
or not built, and a job after one that will run counts as left too.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from maskbench import built, paths
from maskbench.dvc_yaml import reported_jobs
from maskbench.stages import Job

STATES = ("built", "stale", "unfinished", "not built")


def _state(config: dict, job: Job, made_by: dict, code: dict, root: Path) -> str:
    if not all((root / p).exists() for p in job.output.values()):
        return "not built"
    stamp_file = root / paths.BUILT_STAMP.format(job=job.stage.job_name(job.wildcards))
    stamp = json.loads(stamp_file.read_text()) if stamp_file.exists() else None
    if stamp and stamp.get("building"):
        return "unfinished"
    today = built.source(config, job.stage.name, job.wildcards, made_by, code, root)
    return "stale" if built.stale_reasons(stamp, today) else "built"


def states(config: dict, root: Path = Path(".")) -> list[tuple[Job, str]]:
    """Each job of the profile's reports with its state; a built job reading a job that will
    run is stale (it will run after it)."""
    made_by, code, found = built.makers(config), {}, {}
    result = []
    for job in reported_jobs(config):  # in stage order: a job's makers come before it
        state = _state(config, job, made_by, code, root)
        upstream = {made_by[p] for value in job.input.values() for p in ([value] if isinstance(value, str) else value)
                    if p in made_by}
        if state == "built" and any(found.get(u, "built") != "built" for u in upstream):
            state = "stale"
        found[job.stage.job_name(job.wildcards)] = state
        result.append((job, state))
    return result


def summary(config: dict, root: Path = Path(".")) -> str:
    """One line per stage with a job left, and the total."""
    found = states(config, root)
    by_stage: dict[str, Counter] = {}
    for job, state in found:
        by_stage.setdefault(job.stage.name, Counter())[state] += 1
    left = sum(state != "built" for _, state in found)
    lines = [f"profile {config['profile']}: {len(found) - left} of {len(found)} jobs built, {left} left"]
    for stage, counts in by_stage.items():
        if counts["built"] != sum(counts.values()):
            parts = ", ".join(f"{counts[s]} {s}" for s in STATES if counts[s])
            lines.append(f"  {stage:<10} {parts}")
    if left:
        lines.append("`snakemake --cores all reports` (or `dvc repro`) builds what is left; `snakemake -n reports` "
                     "names each job and why")
    return "\n".join(lines)
