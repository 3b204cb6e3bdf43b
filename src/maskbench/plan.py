"""What params.yaml asks of a cluster, checked and added up before anything runs.

`errors(config)` is what stops the workflow while it plans (common.smk) and `maskbench plan`:
a job estimated beyond `cluster.max_runtime` (a pretraining run named with the launch that
would fit), a run on part of several nodes, a task without rows to estimate it from.
`plan(...)` lists the jobs `snakemake TARGET` would run on an empty tree (Snakemake's own dry
run), each with its estimate (`maskbench.resources`) and the jobs it needs; `Plan.summary`
adds them up per stage and schedules them on some GPU counts:

    maskbench plan reports --profile paper --gpus 8 64
"""

from __future__ import annotations

import heapq
import math
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from maskbench import paths
from maskbench.config import declared_runs, launch_settings, pretraining_seeds
from maskbench.config.settings import declared_run
from maskbench.objectives.cards import run_card
from maskbench.resources import (DECLARED, RESUMABLE, Estimate, fitting_micro_batch, grid_points, hours,
                                 pretrain_hours_error, runtime_limit, task_card)
from maskbench.stages import STAGES


def rows_errors(config: dict) -> list[str]:
    """Every task a job fine-tunes or probes needs rows to be estimated from."""
    tasks = {w["task"] for stage in ("finetune", "probe") for w in STAGES[stage].jobs(config)}
    problems = []
    for task in sorted(tasks):
        spec = config["tasks"][task]
        dataset, declared = spec["dataset"], config["resources"]["rows"].get(spec["dataset"])
        predefined = spec["split"]["method"] == "predefined"
        if "rows" in task_card(task) or "word_order" in config["datasets"][dataset]:
            continue
        if declared is None:
            problems.append(f"resources.rows.{dataset}: missing; fine-tuning tasks.{task} is estimated from its "
                            f"dataset's labelled rows until its card ({paths.TASK_CARD.format(task=task)}) exists: "
                            + ("rows per split of its own splits, e.g. {train: 392702, dev: 9815}" if predefined
                               else "their total, e.g. 2039"))
        elif predefined != isinstance(declared, dict) or (predefined and not {"train", "dev"} <= declared.keys()):
            problems.append(f"resources.rows.{dataset}: {declared!r}; tasks.{task} has split method "
                            f"{spec['split']['method']!r}, so expected "
                            + ("rows per split with train and dev" if predefined else "one total number"))
    return problems


def errors(config: dict) -> list[str]:
    """What stops the workflow before it plans (common.smk, `maskbench plan`): a throughput row
    missing, a run on several nodes that does not take whole nodes, a task without rows to
    estimate from, a job estimated beyond cluster.max_runtime."""
    cluster = config["cluster"]
    if cluster["gpu"] not in config["throughput"] or cluster["gpu"] == "cpu":
        return [f"cluster.gpu: {cluster['gpu']!r} is not a GPU row of throughput; expected one of "
                f"{sorted(k for k in config['throughput'] if k != 'cpu')}"]
    problems = rows_errors(config)
    for run in declared_runs(config):
        launch, cuda = launch_settings(config, run), STAGES["pretrain"].gpu(config, {"run": run})
        if cuda and launch["nodes"] > 1 and launch["gpus"] != cluster["gpus_per_node"]:
            problems.append(f"launch.runs.{run}: gpus {launch['gpus']} on {launch['nodes']} nodes; a run on several "
                            f"nodes takes whole nodes, gpus = cluster.gpus_per_node ({cluster['gpus_per_node']}): "
                            "SLURM's --gpus counts GPUs over the whole allocation")
    if problems:
        return problems
    for stage, kind in STAGES.items():
        limit = 60 * runtime_limit(config, stage)
        checked = set()
        for w in kind.jobs(config):
            key = tuple(v for k, v in w.items() if k != "seed")  # a seed costs what the others cost
            if key in checked:
                continue
            checked.add(key)
            job = kind.estimate(config, w)
            if job.seconds <= limit:
                continue
            if stage == "pretrain":
                problems.append(pretrain_hours_error(config, w["run"], job))
            elif stage in DECLARED:
                problems.append(f"resources.{stage}.runtime: {config['resources'][stage]['runtime']} min x "
                                f"cluster.safety {cluster['safety']} is beyond cluster.max_runtime "
                                f"{cluster['max_runtime']} "
                                f"less cluster.runtime_margin {cluster['runtime_margin']} (the job cannot resume)")
            else:
                task = w.get("task")
                grid = (f"; one job runs the whole grid of tasks.{task} ({len(grid_points(config, task))} points, "
                        f"tasks.{task}.grid or finetune.grid): shrink it or lower max_train_examples or epochs"
                        if task else "")
                resumes = ("" if stage in RESUMABLE
                           else f" less cluster.runtime_margin {cluster['runtime_margin']} (it cannot resume)")
                problems.append(f"{kind.command(w)}: estimated {hours(job.seconds)} on one {job.device} "
                                "(x cluster.safety), "
                                f"beyond cluster.max_runtime {cluster['max_runtime']} min{resumes}{grid}; or raise "
                                "cluster.max_runtime")
    return problems


def campaign_needs(config: dict, jobs: list[tuple[str, dict]]) -> list[str]:
    """What a GPU campaign of `jobs` needs besides GPUs, checked before it starts rather than
    hours into it: CuPy for ExLM on CUDA (its states alignment's kernel, align.backend cuda or cuda_split, or auto
    where the recorded crossover picks the kernel), and an MLflow server (a SQLite file on a shared
    file system serves many nodes badly)."""
    import importlib.util
    import os

    from maskbench import alignment_record

    needs = []
    exlm = sorted({w["run"] for stage, w in jobs if "run" in w and run_card(config["runs"][w["run"]]).alignment_kernel
                   and stage in ("pretrain", "analyse") and STAGES[stage].gpu(config, w)})
    backend = config["align"]["backend"]
    kernel = (backend in alignment_record.KERNEL_BACKENDS
              or (backend == "auto" and alignment_record.kernel_pays_somewhere()))
    if exlm and kernel and importlib.util.find_spec("cupy") is None:
        needs.append(f"CuPy is not installed here, and {len(exlm)} ExLM run(s) on CUDA align with its kernel "
                     f"(align.backend {config['align']['backend']}; e.g. {exlm[0]}): install cupy-cuda12x where they "
                     "run, or set align.backend: reference (slower)")
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if any(STAGES[stage].gpu(config, w)
           for stage, w in jobs) and not uri.startswith(("http://", "https://", "databricks")):
        needs.append(f"MLflow goes to {uri or 'the SQLite file at the repository root'}: under the SLURM profile start "
                     "an MLflow server and export MLFLOW_TRACKING_URI=http://HOST:PORT before submitting "
                     "(docs/scaling-out.md); many nodes writing one SQLite file on a shared file system lock and fail")
    return needs


# --- the plan: jobs of a target, their bill and wall time ---------------------------------------

def planned_jobs(raw: dict, root: Path, targets: list[str]) -> list[tuple[str, dict]]:
    """(stage, wildcards) of every job `snakemake TARGETS` runs on an empty tree, as Snakemake's
    own dry run lists them: the workflow and params.yaml as given (`raw`, its profile picked) are
    copied into a scratch directory (the sources linked: the report reads the papers' numbers
    there), so nothing built here counts and params.yaml stays as it is."""
    with tempfile.TemporaryDirectory(prefix="maskbench-plan-") as scratch:
        shutil.copy(root / "Snakefile", scratch)
        shutil.copytree(root / "workflow", Path(scratch) / "workflow")
        (Path(scratch) / "src").symlink_to((root / "src").resolve())
        (Path(scratch) / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
        dry = subprocess.run([sys.executable, "-m", "snakemake", "--dry-run", "--printshellcmds", *targets],
                             cwd=scratch, capture_output=True, text=True)
    if dry.returncode:
        raise RuntimeError(f"snakemake --dry-run {' '.join(targets)} failed:\n{(dry.stdout + dry.stderr)[-3000:]}")
    # each job's command: "Shell command: maskbench STAGE --name value ..."
    return [job for line in dry.stdout.splitlines() if (job := job_of(line.removeprefix("Shell command: ")))]


def job_of(command: str) -> tuple[str, dict] | None:
    """(stage, wildcards) of a job's `maskbench STAGE --name value ...` command; None for
    another line of a dry run."""
    words = shlex.split(command) if command.startswith("maskbench ") else []
    if len(words) < 2 or words[1] not in STAGES:
        return None
    options = dict(zip(words[2::2], words[3::2]))
    return words[1], {name: int(options[f"--{name}"]) if name == "seed" else options[f"--{name}"]
                      for name in STAGES[words[1]].wildcards}


def dependencies(config: dict, jobs: list[tuple[str, dict]]) -> list[set[int]]:
    """For each job, the jobs (indices) that write its inputs (the stage table's files)."""
    writer = {path: i for i, (stage, w) in enumerate(jobs) for path in STAGES[stage].job_outputs(config, w).values()}
    needs = []
    for stage, w in jobs:
        inputs = STAGES[stage].inputs(config, w).values()
        files = [p for value in inputs for p in ([value] if isinstance(value, str) else value)]
        needs.append({writer[p] for p in files if p in writer})
    return needs


def wall_seconds(jobs: list[Estimate], needs: list[set[int]], gpus: int, cores: int | None) -> float:
    """Greedy list schedule of the jobs on `gpus` GPUs (and `cores` CPU cores for the jobs
    without GPUs; None: as many as they ask): whenever a job ends, start every job whose inputs
    are made and whose GPUs and cores are free, longest path to the end first. A job asking more
    GPUs than there are runs on all of them, as many GPU-hours."""
    users = [set() for _ in jobs]
    for i, need in enumerate(needs):
        for j in need:
            users[j].add(i)
    tail = [0.0] * len(jobs)  # the longest chain of work from a job's start to the end
    for i in reversed(topological(needs)):
        tail[i] = jobs[i].seconds + max((tail[u] for u in users[i]), default=0.0)
    waiting = [len(need) for need in needs]
    ready = [i for i, n in enumerate(waiting) if n == 0]
    running, now, free = [], 0.0, {"gpus": gpus, "cores": math.inf if cores is None else cores}
    while ready or running:
        ready.sort(key=lambda i: -tail[i])
        for i in list(ready):
            asked = 0 if jobs[i].gpus else jobs[i].nodes * jobs[i].tasks_per_node * jobs[i].threads
            held = {"gpus": min(jobs[i].gpus, gpus), "cores": asked if cores is None else min(asked, cores)}
            if all(held[k] <= free[k] for k in held):
                for k in held:
                    free[k] -= held[k]
                stretch = jobs[i].gpus / held["gpus"] if held["gpus"] else 1.0
                heapq.heappush(running, (now + jobs[i].seconds * stretch, i, held))
                ready.remove(i)
        now, i, held = heapq.heappop(running)
        for k in held:
            free[k] += held[k]
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    return now


def topological(needs: list[set[int]]) -> list[int]:
    """Job indices, every job after those it needs."""
    order, placed = [], set()

    def place(i):
        if i not in placed:
            placed.add(i)
            for j in sorted(needs[i]):
                place(j)
            order.append(i)

    for i in range(len(needs)):
        place(i)
    return order


# The stages that make data/ (no GPU, no model): built on a CPU machine and carried to the GPUs
DATA_STAGES = ("download", "tokenizer", "tokenize", "task")


@dataclass
class Plan:
    """The jobs of some targets under a profile (stage, wildcards), their estimates and, for
    each, the jobs it needs."""

    profile: str
    targets: list[str]
    jobs: list[tuple[str, dict]]
    estimates: list[Estimate]
    needs: list[set[int]]

    def stages(self) -> dict[str, dict]:
        """Per stage (in the stage table's order): jobs, GPU- and CPU-hours, the largest host and
        GPU memory a job asks, the longest job."""
        rows = {}
        for stage in STAGES:
            mine = [e for (s, _), e in zip(self.jobs, self.estimates) if s == stage]
            if mine:
                gpu_mem = [e.gpu_mem_gb for e in mine if e.gpu_mem_gb is not None]
                rows[stage] = {"jobs": len(mine), "gpu_hours": sum(e.gpu_hours for e in mine),
                               "cpu_hours": sum(e.cpu_hours for e in mine),
                               "host_mem_mb": max(e.host_mem_mb for e in mine),
                               "gpu_mem_gb": max(gpu_mem) if gpu_mem else None,
                               "longest_hours": max(e.seconds for e in mine) / 3600,
                               "devices": sorted({e.device for e in mine})}
        return rows

    def seed_gpu_hours(self, config: dict) -> dict[str, float]:
        """GPU-hours per pretraining seed of each declared run (its instances' pretraining,
        fine-tuning and probes): what one more seed of it costs (the power table prices the
        seeds that would decide a claim with it)."""
        found = {}
        for (_, w), e in zip(self.jobs, self.estimates):
            if "run" in w and e.gpu_hours:
                run = declared_run(config, w["run"])
                found[run] = found.get(run, 0.0) + e.gpu_hours / len(pretraining_seeds(config, run))
        return found

    def beyond_memory(self, config: dict) -> list[str]:
        """The jobs whose estimated peak is above `cluster.gpu_memory_share` of their GPU's memory
        (`throughput.<gpu>.memory_gb`): the CUDA context, the allocator's fragmentation and DDP's
        buckets take the rest, which the estimate does not count. Each line names the job, its
        estimate and the way down: for a pretraining run the micro-batch that fits with the
        global batch unchanged, for fine-tuning its batch_size."""
        share, lines = config["cluster"]["gpu_memory_share"], []
        for (stage, w), e in zip(self.jobs, self.estimates):
            memory = config["throughput"][e.device].get("memory_gb") if e.gpu_mem_gb is not None else None
            if memory is None or e.gpu_mem_gb <= share * memory:
                continue
            where = f"{e.gpu_mem_gb:.1f} of {share:.0%} x {memory} GB"
            if stage == "pretrain":
                micro = fitting_micro_batch(config, w["run"], share * memory)
                fix = (f"set runs.{w['run']}.overrides.micro_batch_size: {micro} (the global batch, and the result, "
                       "unchanged)" if micro else "not even one sequence fits: a smaller model or seq_len")
            else:
                batch = {"perplexity": "generation_perplexity.rows",  # the analysis batches as pretraining
                         "analyse": f"runs.{w.get('run')}.overrides.micro_batch_size"}.get(stage)
                fix = f"lower {batch}" if batch else f"lower the fine-tuning batch_size of tasks.{w['task']}"
            lines.append(f"{STAGES[stage].command(w)}: {where}; {fix}")
        return lines

    def summary(self, config: dict, gpu_counts: list[int], cores: int | None) -> dict:
        """The plan as numbers (what `--json` prints): per stage and in total, and the wall time
        on each of `gpu_counts` GPUs (and `cores` cores for the jobs without one)."""
        if min(gpu_counts) < 1 or (cores is not None and cores < 1):
            raise ValueError(f"GPU and core counts are at least 1, not {gpu_counts} and {cores}")
        stages = self.stages()
        # the same jobs with the data stages already built (on a CPU machine, carried over):
        # what the GPU machine's wall time is once data/ is there (docs/scaling.md)
        data_ready = [replace(e, seconds=0.0) if stage in DATA_STAGES else e
                      for (stage, _), e in zip(self.jobs, self.estimates)]
        return {
            "profile": self.profile, "targets": self.targets, "safety": config["cluster"]["safety"],
            "stages": stages,
            "total": {"jobs": len(self.jobs), "gpu_hours": sum(s["gpu_hours"] for s in stages.values()),
                      "cpu_hours": sum(s["cpu_hours"] for s in stages.values())},
            "beyond_gpu_memory": self.beyond_memory(config),
            "unmeasured_rates": unmeasured_rates(config, sorted({d for s in stages.values() for d in s["devices"]})),
            "before_launch": campaign_needs(config, self.jobs),
            "cores": cores,
            "wall_hours": {str(n): wall_seconds(self.estimates, self.needs, n, cores) / 3600 for n in gpu_counts},
            "wall_hours_data_ready": {str(n): wall_seconds(data_ready, self.needs, n, cores) / 3600
                                      for n in gpu_counts},
        }


def plan(config: dict, raw: dict, root: Path, targets: list[str]) -> Plan:
    """The jobs `targets` need under `config`'s profile (`raw`: params.yaml as written, with that
    profile picked) and their estimates; ValueError listing what params.yaml asks beyond the cluster."""
    problems = errors(config)
    if problems:
        raise ValueError("\n  ".join(["the estimates refuse these parameters:", *problems]))
    jobs = planned_jobs(raw, root, targets)
    estimates = [STAGES[stage].estimate(config, w) for stage, w in jobs]
    return Plan(config["profile"], targets, jobs, estimates, dependencies(config, jobs))


# The figures of a throughput row a committed file may measure (params schema, throughput.measured).
RATES = ("startup_s", "pretrain", "pretrain_compiled", "memory_over_estimate", "float32", "bf16")


def unmeasured_rates(config: dict, devices: list[str]) -> dict[str, list[str]]:
    """The figures of each throughput row the estimates used that no committed file measured
    (`throughput.<row>.measured`): the bill rests on them as guesses, and says so."""
    found = {}
    for device in devices:
        row = config["throughput"][device]
        missing = [key for key in RATES if key in row and key not in row["measured"]]
        if missing:
            found[device] = missing
    return found


def duration(h: float) -> str:
    if h < 1:
        return f"{h * 60:.0f} min" if h * 60 >= 1 else "<1 min"
    return f"{h:,.1f} h" if h < 48 else f"{h:,.0f} h ({h / 24:,.1f} d)"


WIDTH = 120  # terminal columns


def wrap(text: str, first: str = "", rest: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False,
                         break_long_words=False)


def render(summary: dict) -> str:
    """The plan as a terminal table, at most WIDTH columns (a path longer than that aside)."""
    stages, total = summary["stages"], summary["total"]
    gpu_jobs = any(s["gpu_hours"] for s in stages.values())
    devices = sorted({d for s in stages.values() for d in s["devices"]})
    title = f"maskbench plan {' '.join(summary['targets'])}: profile {summary['profile']}, {total['jobs']:,} jobs"
    lines = [*wrap(title),
             f"Estimated, not measured: each job's FLOPs at {' and '.join(f'throughput.{d}' for d in devices)}, "
             f"plus startup, x cluster.safety {summary['safety']}",
             "(rows at resources.tokens or max_len tokens; memory per job: host per node, GPU per GPU).",
             *(wrap("Not measured (no committed file in throughput.<row>.measured): "
                    + "; ".join(f"throughput.{d} {', '.join(keys)}" for d, keys in summary["unmeasured_rates"].items()))
               if summary["unmeasured_rates"] else []), "",
             f"{'stage':<11}{'jobs':>7}{'GPU-h':>11}{'CPU-h':>10}{'host mem':>11}{'GPU mem':>10}   longest job"]
    for stage, s in stages.items():
        gpu_mem = f"{s['gpu_mem_gb']:.1f} GB" if s["gpu_mem_gb"] is not None else "-"
        lines.append(f"{stage:<11}{s['jobs']:>7,}{s['gpu_hours']:>11,.1f}{s['cpu_hours']:>10,.1f}"
                     f"{s['host_mem_mb'] / 1000:>8.1f} GB{gpu_mem:>10}   {duration(s['longest_hours'])}")
    lines += [f"{'total':<11}{total['jobs']:>7,}{total['gpu_hours']:>11,.1f}{total['cpu_hours']:>10,.1f}", ""]
    beyond = summary["beyond_gpu_memory"]
    if beyond:
        lines += [f"{len(beyond)} job(s) estimated above cluster.gpu_memory_share of their GPU's memory:",
                  *(out for line in beyond[:10] for out in wrap(line, "  ", "    ")),
                  *([f"  ... and {len(beyond) - 10} more"] if len(beyond) > 10 else []),
                  ""]
    if summary["before_launch"]:
        lines += ["Before launch:", *(out for need in summary["before_launch"] for out in wrap(need, "  ", "    ")), ""]
    cores = "as many cores as the jobs ask" if summary["cores"] is None else f"{summary['cores']} cores"
    walls = summary["wall_hours"]
    if not gpu_jobs:
        return "\n".join([*lines, f"Wall time on {cores} (a greedy list schedule over the jobs' dependencies): "
                                  f"{duration(next(iter(walls.values())))}"])
    lines += [f"Wall time: a greedy list schedule over the jobs' dependencies, CPU jobs on {cores}",
              "(a job asking more GPUs than there are runs on all of them, as many GPU-hours); with data/ built",
              "first on a CPU machine and carried over (`snakemake --cores all data`, then dvc push/pull or a copy:",
              "docs/scaling.md), the GPU machine's wall time starts at pretraining:"]
    ready = summary["wall_hours_data_ready"]
    return "\n".join([*lines,
                      *(f"  {n:>5} GPU{'s' if int(n) > 1 else ' '}  {duration(h):>12}   data ready: "
                        f"{duration(ready[n])}"
                                 for n, h in walls.items())])
