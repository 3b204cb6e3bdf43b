# Parameters and helpers shared by the rules. Every rule takes its files, params, resources and
# command from the stage table (src/maskbench/stages.py), the one declaration that dvc.yaml and
# the `maskbench` CLI also read.
# Every stage runs a `maskbench` command that reads params.yaml itself, so values passed with
# `snakemake --config` would not reach it (nor DVC): refuse them and point at params.yaml.
import os
import sys
from pathlib import Path

from maskbench import paths
from maskbench.built import stale_path, write_stale_marks
from maskbench.clock import clock_skew_error
from maskbench.config import ParamsError, profile_override, read_params, snakemake_config_error
from maskbench.config.planned import PLANNED_ENV, record_plan
from maskbench.job_params import code_record_path, record_path, write_records
from maskbench.plan import errors as resource_errors
from maskbench.report.items import built_tables, index_page
from maskbench.stages import STAGES

try:
    RAW_PARAMS, PARAMS = read_params("params.yaml")  # validated once, with the CLI's messages
except ParamsError as exc:
    raise WorkflowError(str(exc)) from None
if note := profile_override("params.yaml"):  # which file chose the profile, so an edit of params.yaml's does not mislead
    print(f"note: {note}", file=sys.stderr)
# What no job may ask: beyond cluster.max_runtime (with the launch that would fit), a run on part
# of several nodes, a task without rows to estimate it from (maskbench.plan; `maskbench plan`).
if problems := resource_errors(PARAMS):
    raise WorkflowError("params.yaml asks more than the cluster gives:\n  " + "\n  ".join(problems))
if config:
    raise WorkflowError(snakemake_config_error(config, RAW_PARAMS))
if skew := clock_skew_error():  # files dated in the future (maskbench.clock)
    raise WorkflowError(skew)
# The parameters these jobs are planned with: each job refuses to start if params.yaml has
# changed since in a key it reads (maskbench.config.planned). Handed over in the environment,
# not the command: a command naming the hash would change with every edit of params.yaml, and
# Snakemake re-runs every job whose rule's command changed.
os.environ[PLANNED_ENV] = str(record_plan(PARAMS))
# Each job's params.yaml values, recorded where DVC reads them too (maskbench.job_params): a
# changed value re-runs the job in either tool, and a job either tool built is built for both.
# And each stage's code, as DVC hashes it: a code change re-runs the same jobs in both tools.
write_records(PARAMS)
# What each job's outputs were built from, as the job itself stamped them, whichever tool ran it,
# against what it would read today: a stale job's mark (an input) is rewritten newer than its
# outputs, so that it re-runs (maskbench.built). Not in a job's own Snakemake (a cluster job
# reads the Snakefile again): its command is running, and the main process judged it.
if workflow.is_main_process:
    write_stale_marks(PARAMS)



def hold_workspace():
    """The workspace lock, for this Snakemake's life (its jobs run under it)."""
    from maskbench.workspace import Busy, acquire

    try:
        acquire("snakemake", check_dvc=True)
    except Busy as exc:
        raise WorkflowError(str(exc)) from None


NAME = r"[A-Za-z][A-Za-z0-9_-]*"


wildcard_constraints:
    dataset=NAME,
    task=NAME,
    run=NAME,
    table=r"table[0-9]+",
    modality="text|smiles",
    seed=r"[0-9]+",


def _wildcards(stage, wildcards):
    return {name: int(wildcards[name]) if name == "seed" else wildcards[name] for name in STAGES[stage].wildcards}


def job_input(stage, w):
    """The named inputs of the job with wildcards `w`, the record of the params.yaml values it
    reads and that of its stage's code (a changed value or source file re-runs it), and its
    stale mark (outputs built from something else, by either tool)."""
    return STAGES[stage].inputs(PARAMS, w) | {
        "params_record": record_path(stage, w), "code_record": code_record_path(stage),
        "stale_mark": stale_path(stage, w)}


def stage_input(stage):
    """A job's named inputs (`input: unpack(stage_input("pretrain"))`): `job_input`."""
    return lambda w: job_input(stage, _wildcards(stage, w))


def _marked(stage, outputs):
    return {name: directory(p) if name in STAGES[stage].directories else p for name, p in outputs.items()}


def stage_output(stage):
    """The named outputs of a stage, directories marked (`output: **stage_output("pretrain")`)."""
    return _marked(stage, STAGES[stage].outputs)


def job_output(stage, w):
    """The named outputs of one job, its kept ones included (`paths.KEPT`), directories marked."""
    return _marked(stage, STAGES[stage].job_outputs(PARAMS, w))


def stage_threads(stage):
    return lambda w: STAGES[stage].resources(PARAMS, _wildcards(stage, w))["threads"]


# What a job may ask the scheduler for besides threads (maskbench.resources.scheduler_resources):
# mem_mb (per node), runtime (minutes), gpu (over all nodes); a pretraining run on several nodes
# also nodes, tasks_per_node (or tasks), tasks_per_gpu and mpi (workflow/profiles/slurm).
RESOURCE_KEYS = ("mem_mb", "runtime", "gpu", "nodes", "tasks_per_node", "tasks", "tasks_per_gpu", "mpi")


def stage_resources(stage):
    """A job's resources, estimated from its work; a key it does not ask for evaluates to None,
    which Snakemake leaves unset."""
    return {key: (lambda w, key=key: STAGES[stage].resources(PARAMS, _wildcards(stage, w)).get(key))
            for key in RESOURCE_KEYS}


def job_resources(stage, w):
    """The resources of the job with wildcards `w`, but threads (a rule's own directive)."""
    asked = STAGES[stage].resources(PARAMS, w)
    return {key: asked[key] for key in RESOURCE_KEYS if asked.get(key) is not None}


def stage_shell(stage):
    """The job's `maskbench` command, logging to the rule's log file."""
    kind = STAGES[stage]
    return kind.command({name: f"{{wildcards.{name}}}" for name in kind.wildcards}) + " --log {log}"


# The items of `snakemake --report`: inputs of the `built`, `all` and `reports` targets, marked report(),
# that exist when the DAG is built, never a rule's outputs, which the report would require of
# every table (maskbench.report.items). Captions are resolved here, beside workflow/report/.
CAPTIONS = {name: workflow.current_basedir.join(f"../report/{name}.rst") for name in ("table", "figure", "index")}


def report_items(wildcards):
    """Each built table's page (Tables) and figures (Figures, under the table), and the index
    made from the cards (Index)."""
    items = []
    for table in built_tables(PARAMS, Path(".")):
        items.append(report(paths.REPORT_HTML.format(table=table), caption=CAPTIONS["table"], category="Tables",
                            labels={"table": table}))
        if Path(paths.FIGURES.format(table=table)).is_dir():
            items.append(report(paths.FIGURES.format(table=table), patterns=["{name}.png"], caption=CAPTIONS["figure"],
                                category="Figures", subcategory=table, labels={"table": table, "figure": "{name}"}))
    index = index_page(PARAMS, Path("."), Path("params.yaml"))
    return [*items, report(str(index), caption=CAPTIONS["index"], category="Index", labels={"page": "index"})]


def targets(stage, output):
    """One output of every job of a stage in params.yaml (the `data` and `pretrained` targets)."""
    kind = STAGES[stage]
    return [kind.outputs[output].format(**w) for w in kind.jobs(PARAMS)]
