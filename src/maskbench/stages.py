"""The stage graph, declared once: every stage kind's command, files, params and resources.

Snakemake (workflow/rules/*.smk), the DVC generator (`maskbench dvc-yaml`) and the CLI all
read this table, so a stage's inputs and outputs are spelled in one place:

    STAGES["pretrain"].inputs(config, {"run": "mlm"})   # {"tokens": "data/tokens/text", ...}
    STAGES["pretrain"].outputs                          # {"model": "runs/pretrain/{run}/model", ...}
    STAGES["pretrain"].command({"run": "mlm"})          # "maskbench pretrain --run mlm"

A stage kind is a function of its wildcards (dataset, modality, task, run, seed, table): the
paths come from `maskbench.paths`, formatted with them; `jobs` lists the wildcard values of
every job the parameters ask for (DVC spells each job out, Snakemake derives them from its
targets); `reads` names the params.yaml keys a job reads (whole entries less display-only
keys, checked against what the code reads in tests/test_stage_reads.py), so both tools re-run
a job exactly when one of them changes. Adding a stage kind is one entry here, its outputs in
`paths.OUTPUTS` (an output only some of its jobs write in `paths.KEPT`, those jobs named by its
`keeps`), its command in `cli.py` (`cmd_<stage>`), plus one thin rule; `maskbench.dvc_yaml`
derives what DVC needs besides (the code a job hashes, from that command's imports).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from maskbench import paths, resources
from maskbench.config import (
    FINETUNE_SETTINGS_SOURCES,
    analysis_finetune_task,
    corpus_datasets,
    declared_run,
    declared_runs,
    finetune_settings,
    has_key,
    instance_cells,
    lookup,
    pretrained,
    pretraining_runs,
    rank_tables,
    run_settings,
    table_cells,
    table_kind,
    task_seeds,
)
from maskbench.io import job_command

Wildcards = dict  # wildcard name -> value, e.g. {"run": "mlm", "task": "boolq", "seed": 1}


@dataclass(frozen=True)
class Stage:
    """One kind of stage: its wildcards, the input files of a job (`inputs`), its outputs (path
    patterns over the wildcards, declared in `paths.OUTPUTS`; which of them are directories:
    `paths.DIRECTORIES`), the params.yaml keys it reads, its command, resources and log. What
    only DVC needs (the code it hashes, metrics, plots, uncached outputs) is `maskbench.dvc_yaml`'s."""

    name: str
    help: str
    wildcards: tuple[str, ...]
    inputs: Callable[[dict, Wildcards], dict[str, str | list[str]]]
    jobs: Callable[[dict], list[Wildcards]]
    reads: Callable[[dict, Wildcards], list[str]]
    threads: Callable[[dict, Wildcards], int] = lambda config, w: 1
    gpu: Callable[[dict, Wildcards], bool] = lambda config, w: False
    # which of its stage's `paths.KEPT` outputs a job writes besides `outputs`
    keeps: Callable[[dict, Wildcards], tuple[str, ...]] = lambda config, w: ()

    @property
    def log(self) -> str:
        return paths.LOGS[self.name]

    @property
    def outputs(self) -> dict[str, str]:
        return paths.OUTPUTS[self.name]

    @property
    def directories(self) -> tuple[str, ...]:
        outputs = self.outputs | paths.KEPT.get(self.name, {})
        return tuple(name for name, pattern in outputs.items() if pattern in paths.DIRECTORIES)

    def command(self, w: Wildcards) -> str:
        """The shell command of one job (without `--log`: the CLI logs to `log` by default)."""
        return job_command(self.name, {k: w[k] for k in self.wildcards})

    def job_name(self, w: Wildcards) -> str:
        """The job's name, `<stage>-<wildcards>` (`finetune-mlm-rotten_tomatoes-seed1`): its
        dvc.yaml stage and its parameters' record (`paths.PARAMS_RECORD`)."""
        return "-".join([self.name, *(f"seed{w[k]}" if k == "seed" else str(w[k]) for k in self.wildcards)])

    def output_paths(self, w: Wildcards) -> dict[str, str]:
        """The outputs every job of the stage writes, for wildcards `w`."""
        return {name: pattern.format(**w) for name, pattern in self.outputs.items()}

    def job_outputs(self, config: dict, w: Wildcards) -> dict[str, str]:
        """All the job's outputs: `output_paths` and the kept ones it writes besides."""
        kept = paths.KEPT.get(self.name, {})
        return self.output_paths(w) | {name: kept[name].format(**w) for name in self.keeps(config, w)}

    def keeping_jobs(self, config: dict) -> list[Wildcards]:
        """The jobs that write a kept output (Snakemake gives each a rule of its own)."""
        return [w for w in self.jobs(config) if self.keeps(config, w)]

    def params(self, config: dict, w: Wildcards) -> list[str]:
        """The params.yaml keys the job reads that are set (an unset optional key is left out,
        so dvc.yaml never names a key params.yaml lacks)."""
        return [key for key in dict.fromkeys(self.reads(config, w)) if has_key(config, key)]

    def estimate(self, config: dict, w: Wildcards) -> resources.Estimate:
        """What the job costs, estimated from the work it does (`maskbench.resources`): its
        time, GPUs, nodes, threads and memory."""
        return resources.estimate(config, self.name, w, self.threads(config, w), self.gpu(config, w))

    def resources(self, config: dict, w: Wildcards) -> dict:
        """What the job asks a scheduler for (threads, mem_mb, runtime, gpu; nodes and tasks
        for a run on several nodes): its estimate, refused beyond cluster.max_runtime."""
        return resources.scheduler_resources(config, self.estimate(config, w), self.command(w), self.name)


# What a stage reads of params.yaml is whole entries (a dataset, a task, a run, a section), less
# the keys named below, each with why it cannot change the stage's results: an option added to
# an entry is read, and re-runs the jobs of that entry in both tools, until it is named here.
# Only a wrong name here can leave a result stale; a missing one only re-runs a job for nothing.
# Prose and the report's headers: a table's title or a task's label re-runs the report alone.
DISPLAY_ONLY = {"datasets": ("description", "benchmark"), "tasks": ("label",), "runs": ("description",)}
# Where a dataset's raw files come from: the download reads it, the stages after read the files.
DOWNLOAD_ONLY = ("source",)
# A task's keys that say which fine-tuning seeds there are (each job's seed is in its name) and
# how the report summarises them: read by the aggregate (and the report), which read it whole.
TASK_SUMMARY = ("seeds", "aggregate", "also_report")
# A task's fine-tuning settings (its `overrides`, `grid`): read by fine-tuning and, key by key,
# by the controls (CONTROLS_SKIP), not by the task's data.
TASK_FINETUNING = ("overrides", "grid")
# The fine-tuning settings (`finetune.settings`, or a task's `overrides` of them) a control
# skips: the probe reads the rows and runs the frozen encoder, but trains no encoder; the
# baseline runs no encoder at all.
TRAINING_ONLY = ("epochs", "lr", "warmup_ratio", "weight_decay", "pooler_dropout", "clip_norm", "group_by_length",
                 "doc_stride", "max_answer_tokens")
CONTROLS_SKIP = {"probe": TRAINING_ONLY,
                 "baseline": (*TRAINING_ONLY, "max_len", "batch_size", "device", "threads", "precision", "pooling")}


def _entry(config: dict, section: str, name: str, skip: tuple[str, ...] = ()) -> list[str]:
    """The keys of params.yaml's `section.name` entry but its display-only ones and `skip`."""
    unread = {*DISPLAY_ONLY.get(section, ()), *skip}
    return [f"{section}.{name}.{key}" for key in config[section][name] if key not in unread]


def _run_reads(config: dict, w: Wildcards) -> list[str]:
    """What decides a pretrained instance: its declared run's entry and the shared pretraining
    settings but the list of seeds (the instance's seed is in its name, so adding a seed
    re-runs nothing), its model size, and the DAG alignment's backend (ExLM's, chosen for every run)."""
    run = declared_run(config, w["run"])
    return [*_entry(config, "runs", run), *(f"pretrain.{k}" for k in config["pretrain"] if k != "seeds"),
            f"model_sizes.{run_settings(config, w['run'])['model']}", "align"]


def pretrained_instances(config: dict) -> list[Wildcards]:
    """Every pretrained instance: each declared run once per pretraining seed."""
    return [{"run": r} for r in sorted(i for run in declared_runs(config) for i in pretraining_runs(config, run))]


def _modality_of_run(config: dict, w: Wildcards) -> str:
    return config["runs"][w["run"]]["modality"]


def _dataset_of_task(config: dict, w: Wildcards) -> str:
    return config["tasks"][w["task"]]["dataset"]


def _threads_of_run(config: dict, w: Wildcards) -> int:
    """A job on a pretrained run (pretraining, its analyses) runs with the run's settings."""
    return run_settings(config, w["run"])["threads"]


def _gpu_of_run(config: dict, w: Wildcards) -> bool:
    return run_settings(config, w["run"])["device"] == "cuda"


def _threads_of_task(config: dict, w: Wildcards) -> int:
    """A job on a task's rows (fine-tuning, the probes) runs with the task's fine-tuning settings."""
    return finetune_settings(config, w["task"])["threads"]


def _gpu_of_task(config: dict, w: Wildcards) -> bool:
    return finetune_settings(config, w["task"])["device"] == "cuda"


def _corpus_jobs(config: dict) -> list[Wildcards]:
    """One job per modality with a corpus."""
    return [{"modality": m} for m in sorted(config["corpora"])]


def _corpus_raws(config: dict, modality: str) -> list[str]:
    return [paths.RAW.format(dataset=d) for d in corpus_datasets(config, modality)]


def _corpus_reads(config: dict, modality: str) -> list[str]:
    return [f"corpora.{modality}",
            *(key for d in corpus_datasets(config, modality) for key in _entry(config, "datasets", d, DOWNLOAD_ONLY))]


def _datasets_used(config: dict) -> list[Wildcards]:
    """Every dataset a corpus or a task of params.yaml reads, used by a table or not, so that
    `dvc repro` (like `snakemake --cores all`) prepares all data."""
    used = {d for m in config["corpora"] for d in corpus_datasets(config, m)}
    used |= {spec["dataset"] for spec in config["tasks"].values()}
    return [{"dataset": d} for d in sorted(used)]


def _instance_cells(config: dict) -> list[tuple[str, str]]:
    """(pretrained instance, task) of every cell of every table, each once."""
    return sorted({cell for table in config["tables"] for cell in instance_cells(config, table_cells(config, table))})


def analysis_finetune_job(config: dict, run: str) -> Wildcards | None:
    """The fine-tuning whose encoder the analysis of `run` measures (the rank after fine-tuning):
    the run on its analysis task with the task's first seed; None where the analysis needs none."""
    task = analysis_finetune_task(config, run)
    return {"run": run, "task": task, "seed": task_seeds(config, task)[0]} if task else None


def finetune_jobs(config: dict) -> list[Wildcards]:
    """(run, task, seed) of every fine-tuning job the tables need: each pretraining seed's
    encoder with each fine-tuning seed; then those the analyses need that no table does."""
    jobs = [{"run": r, "task": t, "seed": s} for r, t in _instance_cells(config) for s in task_seeds(config, t)]
    analysed = (analysis_finetune_job(config, r) for r in declared_runs(config))
    return jobs + [w for w in analysed if w is not None and w not in jobs]


def _finetune_keeps(config: dict, w: Wildcards) -> tuple[str, ...]:
    """A fine-tuning keeps its encoder when an analysis reads it, and only then."""
    return ("encoder",) if w == analysis_finetune_job(config, w["run"]) else ()


def aggregate_jobs(config: dict) -> list[Wildcards]:
    return [{"run": r, "task": t} for r, t in _instance_cells(config)]


def baseline_jobs(config: dict) -> list[Wildcards]:
    """One baseline job per task a table shows."""
    return [{"task": t} for t in sorted({t for spec in config["tables"].values() for t in spec["tasks"]})]


def probe_jobs(config: dict, table: str | None = None) -> list[Wildcards]:
    """(run, task) of every table cell (of `table`, or of every table) on a whole-sequence task:
    QA is not probed."""
    tables = [table] if table else config["tables"]
    cells = sorted({cell for t in tables for cell in instance_cells(config, table_cells(config, t))})
    return [{"run": r, "task": t} for r, t in cells if config["tasks"][t]["kind"] != "qa"]


def _finetune_settings_sources(task: str) -> list[str]:
    """The params keys a task's fine-tuning settings are merged from (config.finetune_settings)."""
    return [source.format(task=task) for source in FINETUNE_SETTINGS_SOURCES]


def _finetune_reads(config: dict, task: str) -> list[str]:
    """What decides a task's fine-tuning: the shared fine-tuning section but the seeds (each
    job's seed is in its name), and the task's entry, its settings' sources included."""
    return [*(f"finetune.{k}" for k in config["finetune"] if k != "seeds"), *_finetune_settings_sources(task),
            *_entry(config, "tasks", task, TASK_SUMMARY)]


def _controls_reads(stage: str) -> Callable[[dict, Wildcards], list[str]]:
    """A control reads the task's rows as fine-tuning does (its first seed's train subset), so
    the task's entry with its seeds, and the fine-tuning settings it uses, key by key."""
    def reads(config: dict, w: Wildcards) -> list[str]:
        sources = [(source, lookup(config, source)) for source in _finetune_settings_sources(w["task"])
                   if has_key(config, source)]
        return ["finetune.seeds", "controls",
                *_entry(config, "tasks", w["task"], (*TASK_FINETUNING, "aggregate", "also_report")),
                *(f"{where}.{k}" for where, settings in sources for k in settings if k not in CONTROLS_SKIP[stage])]
    return reads


def _analyse_inputs(config: dict, w: Wildcards) -> dict[str, str]:
    inputs = {"model": paths.PRETRAIN_MODEL.format(**w), "objective": paths.PRETRAIN_OBJECTIVE.format(**w),
              "tokens": paths.TOKENS.format(modality=_modality_of_run(config, w))}
    finetuned = analysis_finetune_job(config, w["run"])
    if finetuned:  # the encoder its fine-tuning job keeps (the rank after fine-tuning)
        inputs["encoder"] = paths.FINETUNE_ENCODER.format(**finetuned)
    return inputs


def _analyse_reads(config: dict, w: Wildcards) -> list[str]:
    """What an analysis reads: its run (pretraining's settings: block length, batch, device),
    the shared analysis settings and its modality's case study and fine-tuning task, and that
    task's seeds (the first names the fine-tuning whose encoder it reads, an input file: its
    fine-tuning settings are that job's)."""
    modality, task = _modality_of_run(config, w), analysis_finetune_task(config, w["run"])
    keys = [*_run_reads(config, w),
            *(f"analysis.{k}" for k in config["analysis"] if k not in PER_MODALITY),
            *(f"analysis.{k}.{modality}" for k in PER_MODALITY),
            *(f"tables.{t}.runs" for t in rank_tables(config))]
    if task:
        keys += ["finetune.seeds", f"tasks.{task}.seeds"]
    return keys


# The analysis settings given per modality: an analysis reads its own modality's.
PER_MODALITY = ("case_study", "finetune_task")


def perplexity_jobs(config: dict) -> list[Wildcards]:
    """Every pretrained run of a Look-Around table (table7), each pretraining seed: generation
    perplexity is measured only where a table shows it, so its cost stays bounded; the table
    reads seed 0, the other seeds measure its spread (noise.yaml `measures`)."""
    runs = {i for t in config["tables"] if table_kind(config, t) == "look_around"
            for r in pretrained(config, config["tables"][t]["runs"]) for i in pretraining_runs(config, r)}
    return [{"run": r} for r in sorted(runs)]


def report_inputs(config: dict, w: Wildcards) -> dict[str, str | list[str]]:
    spec, cells = config["tables"][w["table"]], instance_cells(config, table_cells(config, w["table"]))
    # the per-run analyses and training curves measure each run's seed-0 encoder (its own name)
    trained = pretrained(config, spec["runs"])
    return {
        "summaries": [paths.FINETUNE_SUMMARY.format(run=r, task=t) for r, t in cells],
        # every seed's predictions: the verdicts rescore them (maskbench.report.evidence)
        "predictions": [paths.FINETUNE_PREDICTIONS.format(run=r, task=t, seed=s)
                        for r, t in cells for s in task_seeds(config, t)],
        # every seed's arithmetic record, for the footer (maskbench.report.footer.arithmetic_sentence)
        "finetune_metrics": [paths.FINETUNE_METRICS.format(run=r, task=t, seed=s)
                             for r, t in cells for s in task_seeds(config, t)],
        "baselines": [paths.BASELINE_METRICS.format(task=t) for t in spec["tasks"]],
        "task_cards": [paths.TASK_CARD.format(task=t) for t in spec["tasks"]],  # each task's [UNK] share
        "baseline_predictions": [paths.BASELINE_PREDICTIONS.format(task=t) for t in spec["tasks"]],
        "probes": [paths.PROBE_METRICS.format(**cell) for cell in probe_jobs(config, w["table"])],
        # the probes' predictions: ‡ compares them with the fine-tuned seeds' by the verdicts' rule
        "probe_predictions": [paths.PROBE_PREDICTIONS.format(**cell) for cell in probe_jobs(config, w["table"])],
        "analyses": [pattern.format(run=r) for r in trained
                     for pattern in paths.TABLE_ANALYSES[table_kind(config, w["table"])]],
        # the training curves figure of the table's runs
        "curves": [pattern.format(run=r) for r in trained for pattern in (paths.PRETRAIN_LOG, paths.PRETRAIN_VALID)],
        # whether each run left the unigram plateau (unigram_gap): the tables' pretraining column
        # (the `none` control's too: where an untrained encoder stands) and the entropy claims
        "pretrain_metrics": [paths.PRETRAIN_METRICS.format(run=r) for run in spec["runs"]
                             for r in pretraining_runs(config, run)],
        "published": paths.PUBLISHED,  # the papers' numbers and claims set beside ours
    }


def _report_reads(config: dict, w: Wildcards) -> list[str]:
    spec = config["tables"][w["table"]]
    datasets = dict.fromkeys(config["tasks"][t]["dataset"] for t in spec["tasks"])
    return [f"tables.{w['table']}", *(f"runs.{r}" for r in spec["runs"]), *(f"tasks.{t}" for t in spec["tasks"]),
            *(f"datasets.{d}" for d in datasets), "finetune.seeds", "pretrain.seeds", "verdicts"]


STAGES: dict[str, Stage] = {stage.name: stage for stage in [
    Stage(
        name="download",
        help="fetch a dataset into its raw directory and write its data card",
        wildcards=("dataset",),
        inputs=lambda config, w: {},
        jobs=_datasets_used,
        reads=lambda config, w: _entry(config, "datasets", w["dataset"]),
    ),
    Stage(
        name="tokenizer",
        help="train the tokenizer of a modality on its corpus's train split",
        wildcards=("modality",),
        inputs=lambda config, w: {"raw": _corpus_raws(config, w["modality"])},
        jobs=_corpus_jobs,
        reads=lambda config, w: [*_corpus_reads(config, w["modality"]), f"tokenizer.{w['modality']}"],
    ),
    Stage(
        name="tokenize",
        help="write the token streams (memory-mapped) of a modality's corpus",
        wildcards=("modality",),
        inputs=lambda config, w: {"raw": _corpus_raws(config, w["modality"]),
                                  "tokenizer": paths.TOKENIZER.format(**w)},
        jobs=_corpus_jobs,
        reads=lambda config, w: _corpus_reads(config, w["modality"]),
    ),
    Stage(
        name="task",
        help="normalise and split a downstream task's data",
        wildcards=("task",),
        inputs=lambda config, w: {"raw": paths.RAW.format(dataset=_dataset_of_task(config, w)),
                                  "tokenizer": paths.TOKENIZER.format(modality=config["tasks"][w["task"]]["modality"])},
        jobs=lambda config: [{"task": t} for t in sorted(config["tasks"])],
        reads=lambda config, w: [*_entry(config, "tasks", w["task"], (*TASK_SUMMARY, *TASK_FINETUNING)),
                                 "tokenizer.max_unknown_rate",
                                 *_entry(config, "datasets", _dataset_of_task(config, w), DOWNLOAD_ONLY)],
    ),
    Stage(
        name="pretrain",
        help="pretrain a named run (resumes from its last checkpoint)",
        wildcards=("run",),
        inputs=lambda config, w: {
            "tokens": paths.TOKENS.format(modality=_modality_of_run(config, w)),
            "tokenizer": paths.TOKENIZER.format(modality=_modality_of_run(config, w)),
            "cards": [paths.DOWNLOAD_CARD.format(dataset=d)
                      for d in corpus_datasets(config, _modality_of_run(config, w))],
        },
        jobs=pretrained_instances,
        reads=_run_reads,
        threads=_threads_of_run,
        gpu=_gpu_of_run,
    ),
    Stage(
        name="finetune",
        help="fine-tune a pretrained run on a task with one seed",
        wildcards=("run", "task", "seed"),
        inputs=lambda config, w: {
            "model": paths.PRETRAIN_MODEL.format(run=w["run"]),
            "task": paths.TASK.format(task=w["task"]),
            "card": paths.TASK_CARD.format(task=w["task"]),
            "data_card": paths.DOWNLOAD_CARD.format(dataset=_dataset_of_task(config, w)),
        },
        jobs=finetune_jobs,
        reads=lambda config, w: _finetune_reads(config, w["task"]),
        threads=_threads_of_task,
        gpu=_gpu_of_task,
        keeps=_finetune_keeps,
    ),
    Stage(
        name="aggregate",
        help="summarise a run's fine-tuning on a task over seeds (and the grid)",
        wildcards=("run", "task"),
        inputs=lambda config, w: {"seeds": [paths.FINETUNE_METRICS.format(**w, seed=s)
                                            for s in task_seeds(config, w["task"])]},
        jobs=aggregate_jobs,
        reads=lambda config, w: ["finetune.seeds", f"tasks.{w['task']}"],
    ),
    Stage(
        name="baseline",
        help="score a task's trivial baselines (and ECFP on SMILES tasks) on fine-tuning's rows",
        wildcards=("task",),
        inputs=lambda config, w: {"task": paths.TASK.format(**w), "card": paths.TASK_CARD.format(**w)},
        jobs=baseline_jobs,
        reads=_controls_reads("baseline"),
    ),
    Stage(
        name="probe",
        help="fit linear probes on every layer of a frozen pretrained encoder for a whole-sequence task",
        wildcards=("run", "task"),
        inputs=lambda config, w: {"model": paths.PRETRAIN_MODEL.format(run=w["run"]),
                                  "task": paths.TASK.format(task=w["task"]),
                                  "card": paths.TASK_CARD.format(task=w["task"])},
        jobs=probe_jobs,
        reads=_controls_reads("probe"),
        threads=_threads_of_task,
        gpu=_gpu_of_task,
    ),
    Stage(
        name="analyse",
        help="measure a pretrained run: corrupted semantics, prediction entropy, effective rank, ExLM's case study "
             "and alignment",
        wildcards=("run",),
        inputs=_analyse_inputs,
        jobs=pretrained_instances,  # each pretraining seed: the spread of a measure (noise.yaml `measures`)
        reads=_analyse_reads,
        threads=_threads_of_run,
        gpu=_gpu_of_run,
    ),
    Stage(
        name="perplexity",
        help="measure a pretrained run's generation perplexity on held-out text (Look Around Eq. 2, Tab. 7)",
        wildcards=("run",),
        inputs=lambda config, w: {"model": paths.PRETRAIN_MODEL.format(**w),
                                  "objective": paths.PRETRAIN_OBJECTIVE.format(**w),
                                  "tokens": paths.TOKENS.format(modality=_modality_of_run(config, w))},
        jobs=perplexity_jobs,
        reads=lambda config, w: [*_run_reads(config, w), "generation_perplexity"],
        threads=_threads_of_run,
        gpu=_gpu_of_run,
    ),
    Stage(
        name="report",
        help="render a report table and its figures from its runs' fine-tuning, controls and analyses",
        wildcards=("table",),
        inputs=report_inputs,
        jobs=lambda config: [{"table": t} for t in sorted(config["tables"])],
        reads=_report_reads,
    ),
    Stage(
        name="index",
        help="list every table of the profile and its figures with their provenance, and score the papers' claims",
        wildcards=(),
        inputs=lambda config, w: {name: [pattern.format(table=t) for t in sorted(config["tables"])]
                                  for name, pattern in (("reports", paths.REPORT), ("html", paths.REPORT_HTML),
                                                        ("cards", paths.REPORT_CARD), ("figures", paths.FIGURES))}
                                 | {"published": paths.PUBLISHED},  # the claims, one scorecard line each
        jobs=lambda config: [{}],
        reads=lambda config, w: ["tables"],
    ),
]}

# What each wildcard names in params.yaml (a job for an unknown name stops with the choices).
WILDCARD_SECTIONS = {"dataset": "datasets", "modality": "corpora", "task": "tasks", "run": "runs", "table": "tables"}


@dataclass
class Job:
    """One stage job with its files resolved: what a `maskbench <stage>` command works on."""

    stage: Stage
    wildcards: Wildcards
    input: dict[str, str | list[str]] = field(default_factory=dict)
    output: dict[str, str] = field(default_factory=dict)


def job(config: dict, stage: str, w: Wildcards) -> Job:
    """The job of `stage` for wildcards `w`; raises KeyError naming a wildcard params.yaml lacks."""
    kind = STAGES[stage]
    for name in kind.wildcards:
        section = WILDCARD_SECTIONS.get(name)
        if section and w[name] not in config[section]:
            raise KeyError(f"{section}.{w[name]} is not defined in params.yaml; expected one of "
                           f"{sorted(config[section])}")
    return Job(kind, w, kind.inputs(config, w), kind.job_outputs(config, w))


def all_jobs(config: dict) -> list[Job]:
    """Every job of every stage kind, in stage order (what dvc.yaml spells out)."""
    return [job(config, name, w) for name, kind in STAGES.items() for w in kind.jobs(config)]
