"""`maskbench <stage>`: one subcommand per workflow stage, called alike by Snakemake and DVC.

Every subcommand reads and validates params.yaml once (a bad key stops it before anything is
touched), takes the files it reads and writes from the stage table (`maskbench.stages`), and
logs to its stage's log file (`--log`, default `logs/<stage>/<name>.log`) as well as the
console.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from maskbench import cpu_mode, paths, preemption
from maskbench.config import ParamsError, read_params, task_seeds
from maskbench.config.planned import PLANNED_ENV
from maskbench.io import atomic_path, read_json, reading, write_json, write_text
from maskbench.resources import RESUMABLE  # the stages that checkpoint, and take --fresh
from maskbench.stages import STAGES, Job, job


def _setup_logging(log_path: Path) -> None:
    """Log to the console and to the job's log file; Python warnings too. The processes of a
    several-process run (`maskbench.train.distributed`): rank 0 continues the launcher's log,
    rank r writes `<log>.rank<r>` beside it."""
    from maskbench.train.world import inside_world, position

    rank = position()[0]
    if rank:
        log_path = log_path.with_name(f"{log_path.name}.rank{rank}")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[logging.StreamHandler(sys.stderr),
                  logging.FileHandler(log_path, mode="a" if inside_world() and not rank else "w")],
        force=True,
    )
    logging.captureWarnings(True)
    for noisy in ("alembic", "mlflow", "urllib3", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def cmd_download(config: dict, job: Job) -> None:
    from maskbench.data.download import download

    card = download(config, job.wildcards["dataset"], Path(job.output["raw"]), Path(job.output["card"]),
                    Path(paths.PIP_CACHE))
    logging.info("downloaded %s: %s", job.wildcards["dataset"], card["bytes"])


def cmd_tokenizer(config: dict, job: Job) -> None:
    from maskbench.data.corpus import read_corpus
    from maskbench.data.tokenizers import train_tokenizer

    modality = job.wildcards["modality"]
    docs, _ = read_corpus(config, modality, [Path(p) for p in job.input["raw"]])
    tok = train_tokenizer(modality, config["tokenizer"][modality], docs["train"], Path(job.output["tokenizer"]))
    logging.info("trained %s tokenizer on %d train documents: %d tokens", modality, len(docs["train"]), len(tok))


def cmd_tokenize(config: dict, job: Job) -> None:
    from transformers import AutoTokenizer

    from maskbench.config import corpus_datasets
    from maskbench.data.corpus import STREAMS, block_minimum, read_corpus, tokenize_corpus

    modality = job.wildcards["modality"]
    docs, datasets = read_corpus(config, modality, [Path(p) for p in job.input["raw"]])
    with reading(job.input["tokenizer"]):
        tokenizer = AutoTokenizer.from_pretrained(job.input["tokenizer"])
    meta = tokenize_corpus({split: docs[split] for split in STREAMS}, tokenizer, Path(job.output["tokens"]),
                           min_tokens=block_minimum(config, modality))
    write_json(job.output["card"], {"corpus": corpus_datasets(config, modality), "datasets": datasets, **meta})
    logging.info("tokenized %s: %s", modality, meta["splits"])


def cmd_task(config: dict, job: Job) -> None:
    from maskbench.data.tasks import prepare_task

    task = job.wildcards["task"]
    card = prepare_task(config, task, Path(job.input["raw"]), Path(job.input["tokenizer"]), Path(job.output["split"]),
                        Path(job.output["card"]))
    logging.info("prepared %s: rows %s, skipped %s, [UNK] share %s", task, card["rows"], card["skipped"],
                 {split: f"{r['rate']:.3%}" for split, r in card["unknown_tokens"].items()})


def write_scores(path: str, scores: dict[str, float | None]) -> None:
    """The stage's DVC metrics file: its scores or losses alone, under the few names every such
    file shares (train_loss, valid_loss; dev, test: the task's metric), so `dvc metrics show`
    stays one narrow table; the full record is metrics.json (or summary.json) beside it. A
    score that was not measured (an unlabelled test split, the untrained control's training
    loss) is left out."""
    write_json(path, {name: value for name, value in scores.items() if value is not None})


def cmd_pretrain(config: dict, job: Job, fresh: bool = False) -> None:
    from maskbench.train.pretrain import PretrainFiles, pretrain

    run = job.wildcards["run"]
    files = PretrainFiles.of_stage(job.output, Path(paths.PRETRAIN_CHECKPOINT.format(run=run)))
    metrics = pretrain(config, run, Path(job.input["tokens"]), Path(job.input["tokenizer"]),
                       [Path(p) for p in job.input["cards"]], files, fresh)
    if metrics:  # rank 0 writes the run's files; the other ranks of a distributed run return none
        write_scores(job.output["scores"], {key: metrics[key] for key in ("train_loss", "valid_loss")})
        logging.info("pretrained %s: %s", run, metrics)


def cmd_finetune(config: dict, job: Job, fresh: bool = False) -> None:
    from maskbench.finetune.loop import finetune

    run, task, seed = job.wildcards["run"], job.wildcards["task"], job.wildcards["seed"]
    metrics = finetune(config, run, task, seed, Path(job.input["model"]), Path(job.input["task"]),
                       Path(job.input["card"]), Path(job.input["data_card"]), Path(job.output["metrics"]),
                       Path(job.output["predictions"]),
                       encoder_dir=Path(job.output["encoder"]) if "encoder" in job.output else None, fresh=fresh)
    write_scores(job.output["scores"], {"dev": metrics["dev"], "test": metrics["test"]})
    test = "unlabelled" if metrics["test"] is None else f"{metrics['test']:.4f}"
    logging.info("fine-tuned %s on %s (seed %d): %s dev %s, test %s", run, task, seed,
                 metrics["metric"], metrics["dev"], test)


def cmd_aggregate(config: dict, job: Job) -> None:
    from maskbench.eval.aggregate import aggregate

    run, task = job.wildcards["run"], job.wildcards["task"]
    seed_metrics = {seed: read_json(path) for seed, path in zip(task_seeds(config, task), job.input["seeds"])
                    if Path(path).exists()}
    summary = aggregate(config, run, task, seed_metrics)
    write_json(job.output["summary"], summary)
    write_scores(job.output["scores"], {summary["split"]: summary["value"]})
    logging.info("%s on %s: %s %s = %s over seeds %s", run, task, summary["aggregate"],
                 summary["metric"], summary["value"], list(summary["scores"]))


def cmd_baseline(config: dict, job: Job) -> None:
    from maskbench.controls.baselines import baselines

    task = job.wildcards["task"]
    metrics = baselines(config, task, Path(job.input["task"]), Path(job.input["card"]), Path(job.output["metrics"]),
                        Path(job.output["predictions"]))
    logging.info("baselines of %s (%s on %s): %s", task, metrics["metric"], metrics["split"],
                 {name: b["value"] for name, b in metrics["baselines"].items()})


def cmd_probe(config: dict, job: Job) -> None:
    from maskbench.controls.probe import probe

    run, task = job.wildcards["run"], job.wildcards["task"]
    metrics = probe(config, run, task, Path(job.input["model"]), Path(job.input["task"]), Path(job.input["card"]),
                    Path(job.output["metrics"]), Path(job.output["predictions"]))
    logging.info("probed %s on %s: best layer %d, %s dev %s, %s %s", run, task, metrics["best_layer"],
                 metrics["metric"], metrics["dev"], metrics["split"], metrics["value"])


def cmd_analyse(config: dict, job: Job) -> None:
    from maskbench.analysis.stage import analyse

    analyse(config, job.wildcards["run"], job.input, job.output)
    logging.info("analysed %s: %s", job.wildcards["run"], ", ".join(job.output.values()))


def cmd_perplexity(config: dict, job: Job) -> None:
    from maskbench.analysis.perplexity import measure

    measure(config, job.wildcards["run"], job.input, job.output)
    logging.info("wrote %s", job.output["metrics"])


def cmd_report(config: dict, job: Job) -> None:
    from maskbench.report.html import to_html
    from maskbench.report.index import table_card
    from maskbench.report.kinds import render

    table = job.wildcards["table"]
    with atomic_path(job.output["figures"], is_dir=True) as figures:  # the figures appear only with the table
        figures.mkdir(parents=True, exist_ok=True)
        rendered = render(config, table, Path("."), figures)  # reads the job's inputs
        card = table_card(config, table, rendered, figures, Path("."))
    write_text(job.output["report"], rendered.markdown)
    write_text(job.output["html"], to_html(rendered.markdown, f"{table}: {config['tables'][table]['title']}",
                                           figures_from=Path(job.output["html"]).parent))  # its figures, inlined
    write_json(job.output["card"], card)
    logging.info("wrote %s (and %s, %s) and its figures in %s", job.output["report"], job.output["html"],
                 job.output["card"], job.output["figures"])


def cmd_index(config: dict, job: Job) -> None:
    from maskbench.report.html import to_html
    from maskbench.report.index import render, scorecard_counts

    write_json(job.output["scorecard"], scorecard_counts(config, Path(".")))
    write_text(job.output["index"], render(config, Path("."), paths.REPORT))
    write_text(job.output["html"], to_html(render(config, Path("."), paths.REPORT_HTML), "maskbench: the report"))
    logging.info("wrote %s and %s", job.output["index"], job.output["html"])


def _launch_processes(config: dict, run: str, argv: list[str]) -> int | None:
    """Where params.yaml's `launch` gives `run` several processes and this is not one of them
    yet, start them all on this same command, and return their status (None: run here)."""
    from maskbench.config import launch_settings, run_settings
    from maskbench.train.distributed import relaunch
    from maskbench.train.world import inside_world

    launch = launch_settings(config, run)
    if launch["gpus"] * launch["nodes"] == 1 or inside_world():
        return None
    logging.info("pretrain %s: launching %d process(es) on each of %d node(s)", run, launch["gpus"], launch["nodes"])
    for handler in logging.getLogger().handlers:  # rank 0 continues the log file
        handler.flush()
    return relaunch(argv, launch["gpus"], launch["nodes"], run_settings(config, run)["threads"])


def _claim_gpus(config: dict, stage: str, wildcards: dict) -> None:
    """A `device: cuda` job takes GPUs of its own, as many per node as it asks the scheduler for,
    before anything initialises CUDA (`maskbench.gpus`); the ranks it launches inherit them."""
    from maskbench.gpus import assign
    from maskbench.train.world import inside_world

    if inside_world() or not STAGES[stage].gpu(config, wildcards):
        return
    estimate = STAGES[stage].estimate(config, wildcards)
    assign(estimate.gpus // estimate.nodes)


STAGE_COMMANDS = {"download": cmd_download, "tokenizer": cmd_tokenizer, "tokenize": cmd_tokenize, "task": cmd_task,
                  "pretrain": cmd_pretrain, "finetune": cmd_finetune, "aggregate": cmd_aggregate,
                  "baseline": cmd_baseline, "probe": cmd_probe, "analyse": cmd_analyse,
                  "perplexity": cmd_perplexity, "report": cmd_report, "index": cmd_index}


def _hold_workspace(tool: str) -> None:
    """One build at a time here: refuse while Snakemake (or a DVC stage's command) runs."""
    from maskbench.workspace import Busy, acquire

    try:
        acquire(tool)
    except Busy as exc:
        sys.exit(f"error: {exc}")


def check_params(raw: dict, schema: dict, path: str) -> tuple[dict, list[str]]:
    """What `maskbench validate` makes of params.yaml as read (`raw`, from `path`): every profile,
    not only the active one, its parameters (`maskbench.config.validate`) and what its jobs would
    ask a scheduler (`maskbench.plan.errors`). Returns the active profile's parameters and the
    warnings about what its campaign needs; raises ParamsError, one line per problem."""
    from maskbench.config import add_pretraining_seeds, resolve_profile, validate
    from maskbench.plan import campaign_needs
    from maskbench.plan import errors as resource_errors

    config = validate(raw, schema, path, every_profile=True)
    asks = [f"{path} (profile {name}): {problem}" for name in raw["profiles"]
            for problem in resource_errors(add_pretraining_seeds(resolve_profile(raw, name)))]
    if asks:  # what Snakemake would refuse at its start (workflow/rules/common.smk)
        raise ParamsError("params.yaml asks more than the cluster gives:\n  " + "\n  ".join(asks))
    jobs = [(stage, w) for stage, kind in STAGES.items() for w in kind.jobs(config)]
    return config, [f"profile {config['profile']}: {need}" for need in campaign_needs(config, jobs)]


def cmd_validate(args) -> None:
    """`check_params`; and whether dvc.yaml still matches (with `--stamp`, dvc.yaml's first
    stage: a stale dvc.yaml would run the wrong stages, so stop)."""
    from maskbench.config import chosen_profile, profile_override, read_yaml, schema_path
    from maskbench.dvc_yaml import is_stale
    from maskbench.job_params import write_records

    if args.stamp:
        _hold_workspace("dvc repro")  # DVC's first stage, before anything: DVC removes outputs after it
    try:
        raw = read_yaml(Path(args.params))
        raw["profile"] = chosen_profile(args.params) or raw["profile"]
        config, warnings = check_params(raw, read_yaml(schema_path()), args.params)
    except ParamsError as exc:
        sys.exit(f"error: {exc}")
    if note := profile_override(args.params):
        print(f"note: {note}", file=sys.stderr)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if is_stale(config, args.params):
        message = f"dvc.yaml does not match {args.params} (profile {config['profile']}): run `maskbench dvc-yaml`"
        if args.stamp:
            sys.exit(f"error: {message} before `dvc repro`")
        print(f"warning: {message} before `dvc repro` (Snakemake is not affected)", file=sys.stderr)
    if args.stamp:
        # Fixed content: the stages after it depend on this file, and must not re-run because
        # params.yaml changed somewhere they do not read.
        write_json(Path(args.stamp), {"params": args.params, "valid": True})
        write_records(config)  # each job's values, before any job runs (maskbench.job_params)
    print(f"{args.params}: valid (every profile; active: {config['profile']})")


def cmd_tracking_init(args) -> None:
    from maskbench.train.tracking import ensure_store

    if os.environ.get("MASKBENCH_TRACKING") == "off":  # the Snakefile's onstart on a machine without MLflow
        print("MASKBENCH_TRACKING=off: no MLflow store")
        return
    print(ensure_store(_read_params(args.params)[1]["tracking"]["experiment"]))


def cmd_dvc_plots(args) -> None:
    from maskbench.dvc_plots import show

    sys.exit(show(args.dvc_args))


def cmd_dvc_yaml(args) -> None:
    from maskbench.dvc_yaml import is_stale, render_dvc_yaml

    raw, config = _read_params(args.params)
    if args.check:
        if is_stale(config, args.params) or not Path("dvc.yaml").exists():
            sys.exit("dvc.yaml is out of date with params.yaml; run `maskbench dvc-yaml` to regenerate it")
        print("dvc.yaml is up to date")
        return
    write_text("dvc.yaml", render_dvc_yaml(config, args.params))
    print("wrote dvc.yaml")


def cmd_profile(args) -> None:
    """Choose the profile of this checkout (`config.PROFILE_FILE`, not in git) and regenerate
    dvc.yaml with it (not in git either: generated), so that DVC's commands (`dvc status`, `dvc
    metrics show`, ...) speak of the new profile's jobs at once, and no tracked file changes:
    only `dvc repro` checks dvc.yaml against the parameters. The parameters are validated
    with the new profile before either file is written."""
    from maskbench.config import profile_file, switch_profile
    from maskbench.dvc_yaml import render_dvc_yaml, reported_jobs

    path = Path(args.params)
    try:
        raw, config = switch_profile(path, args.name)
    except ParamsError as exc:
        sys.exit(f"error: {exc}")
    write_text(profile_file(path), f"profile: {args.name}\n")
    write_text("dvc.yaml", render_dvc_yaml(config, path))  # whose first stage reads the profile from it
    print(f"{profile_file(path)}: profile {args.name}; wrote dvc.yaml ({len(reported_jobs(config))} jobs: "
          f"what `snakemake --cores all reports` builds)")


def cmd_status(args) -> None:
    from maskbench.status import summary

    print(summary(_read_params(args.params)[1]))


def cmd_plan(args) -> None:
    """The jobs the targets need on an empty tree, what they cost, and the wall time on some
    GPU counts; another profile of params.yaml with --profile, params.yaml left as it is."""
    import json

    from maskbench.config import chosen_profile, read_yaml, schema_path, validate
    from maskbench.plan import plan, render
    from maskbench.power import Bill, render as render_power, target_tables

    path = Path(args.params)
    try:
        raw = read_yaml(path)
        raw["profile"] = args.profile or chosen_profile(path) or raw["profile"]
        if args.seeds:
            with_pretraining_seeds(raw, args.seeds)
        config = validate(raw, read_yaml(schema_path()), path, every_profile=False)
        jobs = plan(config, raw, path.resolve().parent, args.targets)
        cores = args.cores or os.cpu_count()  # as `snakemake --cores all` here
        summary = jobs.summary(config, args.gpus, cores)
    except (ParamsError, ValueError, RuntimeError) as exc:
        sys.exit(f"error: {exc}")
    print(json.dumps(summary, indent=1) if args.json else render(summary))
    reports = [paths.REPORT.format(table=t) for t in target_tables(config, args.targets, others=True)]
    if reports and not (args.json or args.no_power):
        print("\n" + render_power(config, reports, Bill(summary["total"]["gpu_hours"], jobs.seed_gpu_hours(config))))


def with_pretraining_seeds(raw: dict, count: int) -> None:
    """params.yaml's active profile with `count` pretraining seeds (0 .. count - 1) for every run:
    its `pretrain.seeds` and any run's own `overrides.seeds` (`maskbench plan --seeds`)."""
    if count < 1:
        raise ValueError(f"--seeds {count}: expected at least 1 pretraining seed")
    profile = raw["profiles"].setdefault(raw["profile"], {}) or {}
    raw["profiles"][raw["profile"]] = profile
    profile.setdefault("pretrain", {})["seeds"] = list(range(count))
    for spec in (profile.get("runs") or {}).values():
        if "seeds" in (spec or {}).get("overrides", {}):
            spec["overrides"]["seeds"] = list(range(count))


def cmd_power(args) -> None:
    """For every claim the targets check, the smallest gap the profile could decide beside the
    paper's (maskbench.power); another profile with --profile, params.yaml left as it is."""
    from maskbench.config import chosen_profile, read_yaml, schema_path, validate
    from maskbench.power import render

    path = Path(args.params)
    try:
        raw = read_yaml(path)
        raw["profile"] = args.profile or chosen_profile(path) or raw["profile"]
        config = validate(raw, read_yaml(schema_path()), path, every_profile=False)
        print(render(config, args.targets))
    except (ParamsError, ValueError) as exc:
        sys.exit(f"error: {exc}")


def cmd_compare(args) -> None:
    """A rebuilt table against its reference, footers then cells (maskbench.report.compare); the
    exit code says which: 0 reproduced, 3 reproduced within the noise, 1 beyond it, 2 bad input."""
    from maskbench.report.compare import EXIT, CompareError, default_noise, pick_reference, report

    table = Path(args.table)
    try:
        reference, picked = (Path(args.reference), None) if args.reference else pick_reference(table)
        noise = Path(args.noise) if args.noise else default_noise(table, reference)
        found, lines = report(table, reference, noise, args.within, picked)
    except CompareError as exc:
        sys.exit(f"error: {exc}")
    print("\n".join(lines))
    sys.exit(EXIT[found])


def _read_params(path: str, every_profile: bool = False) -> tuple[dict, dict]:
    try:
        return read_params(path, every_profile)
    except ParamsError as exc:
        sys.exit(f"error: {exc}")


# The stages that stamp the hash of every parameter on what they write: any change refuses them.
STAMPING_STAGES = ("report", "index")


def _require_plan(args, config: dict, wildcards: dict) -> None:
    from maskbench.config.planned import require_plan

    stage = STAGES[args.stage]
    keys = None if args.stage in STAMPING_STAGES else stage.reads(config, wildcards)
    try:
        require_plan(Path(args.planned or os.environ[PLANNED_ENV]), config, keys, stage.command(wildcards), args.params)
    except ParamsError as exc:
        sys.exit(f"error: {exc}")


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's, as pip installed it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("maskbench")
    except PackageNotFoundError:  # imported from a checkout's src/ without `pip install -e .`
        return "(not installed: pip install -e . gives the version)"


# Help for each wildcard option of the stage subcommands.
WILDCARD_OPTIONS = {
    "dataset": {"help": "a key of params.yaml `datasets`"},
    "modality": {"choices": ["text", "smiles"], "help": "which corpus (params.yaml `corpora`)"},
    "task": {"help": "a key of params.yaml `tasks`"},
    "run": {"help": "a key of params.yaml `runs`"},
    "seed": {"type": int, "help": "fine-tuning seed"},
    "table": {"help": "a key of params.yaml `tables`"},
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="maskbench", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"maskbench {package_version()}")
    parser.add_argument("--params", default="params.yaml", help="parameters file (default: params.yaml; the schema "
                                                                 "comes with the maskbench code, wherever the file is)")
    sub = parser.add_subparsers(dest="stage", required=True, metavar="STAGE")
    check = sub.add_parser("validate", help="check params.yaml (every profile) against the schema, and dvc.yaml "
                                            "against params.yaml")
    check.add_argument("--stamp", metavar="PATH",
                       help=f"also write PATH once valid (dvc.yaml's first stage writes {paths.PARAMS_STAMP}, so a bad "
                            "params.yaml or a stale dvc.yaml stops `dvc repro` before any stage removes its outputs)")
    check.set_defaults(func=cmd_validate)
    for name, stage in STAGES.items():
        writes = ", ".join(stage.outputs.values())
        p = sub.add_parser(name, help=stage.help, description=f"{stage.help}; writes {writes}")
        for wildcard in stage.wildcards:
            p.add_argument(f"--{wildcard}", required=True, **WILDCARD_OPTIONS[wildcard])
        p.add_argument("--log", metavar="PATH", help=f"log file (default: {stage.log})")
        if name in RESUMABLE:
            p.add_argument("--fresh", action="store_true",
                           help="delete the job's checkpoint and start afresh (a checkpoint made with settings that "
                                "change the result is otherwise refused, never discarded)")
        p.add_argument("--planned", metavar="PATH",
                       help=f"the parameters the build was planned with (default: ${PLANNED_ENV}, which the Snakefile "
                            "sets): refuse to run if a key the job reads has changed since (maskbench.config.planned)")
        p.set_defaults(func=None)
    sub.add_parser("tracking-init", help="create the MLflow store and experiment (before parallel jobs)") \
        .set_defaults(func=cmd_tracking_init)
    dvc = sub.add_parser("dvc-yaml", help="regenerate dvc.yaml from params.yaml (same stages as the Snakefile)")
    dvc.add_argument("--check", action="store_true", help="only check that dvc.yaml is up to date")
    dvc.set_defaults(func=cmd_dvc_yaml)
    switch = sub.add_parser("profile", help="switch params.yaml to another profile and regenerate dvc.yaml with it")
    switch.add_argument("name", help="a key of params.yaml `profiles` (smoke, tiny, grid, gpu-day, paper, ...)")
    switch.set_defaults(func=cmd_profile)
    sub.add_parser("status", help="what is left to build of the profile's reports, per stage (a short `dvc status`)",
                   description="Per stage, how many of the jobs `snakemake --cores all reports` (and dvc.yaml) build "
                               "are built, stale or not built, whichever tool built them (maskbench.status).") \
        .set_defaults(func=cmd_status)
    plots = sub.add_parser("dvc-plots", help="`dvc plots show` whose page draws offline (DVC's loads Vega from a CDN)",
                           description="Run `dvc plots show` with a page template that carries the Vega libraries "
                                       "inline (maskbench.dvc_plots); other arguments go to `dvc plots show`.")
    plots.set_defaults(func=cmd_dvc_plots)
    bill = sub.add_parser("plan",
                          help="the jobs of Snakemake targets and their estimated GPU-hours, memory and wall time",
                          description="What `snakemake TARGET...` would run on an empty tree (Snakemake's own dry "
                                      "run), grouped by stage: jobs, GPU- and CPU-hours, the largest host and GPU "
                                      "memory a job asks, and the wall time on some GPU counts. Estimates: each "
                                      "job's FLOPs at params.yaml throughput, x cluster.safety (maskbench.resources, "
                                      "maskbench.plan).")
    bill.add_argument("targets", nargs="+", metavar="TARGET",
                      help=f"Snakemake targets: files ({paths.REPORT.format(table='table1')}) or rules (reports, "
                           "pretrained, data)")
    bill.add_argument("--profile", help="plan this profile of params.yaml instead of the active one (params.yaml is "
                                        "not changed)")
    bill.add_argument("--gpus", type=int, nargs="+", default=[1, 8, 64], metavar="N",
                      help="GPU counts to give the wall time on (default: 1 8 64)")
    bill.add_argument("--cores", type=int, metavar="N", help="CPU cores for the jobs without a GPU (default: this "
                                                             "machine's, as `snakemake --cores all` uses)")
    bill.add_argument("--json", action="store_true", help="print the plan as JSON")
    bill.add_argument("--seeds", type=int, metavar="N", help="plan every run at N pretraining seeds (pretrain.seeds "
                                                              "and runs' own seeds set to 0..N-1; params.yaml is not "
                                                              "changed): the bill of the seeds that would decide")
    bill.add_argument("--no-power", action="store_true", help="leave out the power table printed after the bill for "
                                                               "the targets' tables (`maskbench power`)")
    bill.set_defaults(func=cmd_plan)
    power = sub.add_parser("power", help="the smallest gap each claim of the targets could decide, beside the paper's",
                           description="For every claim the target tables check: the smallest difference the "
                                       "profile's pretraining seeds, fine-tuning seeds and test sets could decide at "
                                       "80 % power by the verdicts' rule, beside the paper's gap: decidable or not "
                                       "(maskbench.power; noise figures in src/maskbench/noise.yaml, each with its "
                                       "source).")
    power.add_argument("targets", nargs="+", metavar="TARGET",
                       help=f"report files ({paths.REPORT.format(table='table1')}) or `reports` for every table")
    power.add_argument("--profile", help="this profile of params.yaml instead of the active one (params.yaml is not "
                                         "changed)")
    power.set_defaults(func=cmd_power)
    same = sub.add_parser("compare", help="a rebuilt table against its reference: reproduced, within the noise, or not",
                          description="Cell by cell, TABLE against REFERENCE. Their footers first: on the same "
                                      "arithmetic every cell must be identical; on another (named in the first line) "
                                      "a differing cell's headline number is judged against the pretraining-seed "
                                      "spread the reference (or NOISE) measured for it, or 'not judged' where none "
                                      "was. Exit code: 0 reproduced (identical), 3 reproduced within the noise, "
                                      "1 cells that differ beyond it, 2 bad input.")
    same.add_argument("table", metavar="TABLE", help=f"the rebuilt page, e.g. {paths.REPORT.format(table='table1')}")
    same.add_argument("reference", metavar="REFERENCE", nargs="?",
                      help=f"its reference, e.g. {paths.REFERENCE.format(name='table1-tiny.md')} (default: the "
                           "current one of TABLE's profile and table in "
                           f"{paths.REFERENCE.format(name='references.yaml')} computed on TABLE's arithmetic, else "
                           "the first of them)")
    same.add_argument("--noise", metavar="PAGE",
                      help="a several-pretraining-seed build of the same table to read the noise from (default: "
                           f"{paths.REFERENCE.format(name='<profile>-3seeds/')}<TABLE's name>, where there is one)")
    same.add_argument("--within", type=float, default=2.0, metavar="K",
                      help="a difference up to K x the spread counts as noise (default: 2)")
    same.set_defaults(func=cmd_compare)
    return parser


def quiet_progress_bars() -> None:
    """No progress bars in a job's log: transformers draws one ("Loading weights") each time a
    model loads, 176 of them in a smoke build's logs, burying what the job says. A job logs
    its own progress; the bars stay off unless HF_HUB_DISABLE_PROGRESS_BARS is set otherwise
    (transformers reads it when first imported, which a stage does after this)."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def _command_typo(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The error for a command that is not one (`maskbench pretrian`), with the nearest ones."""
    import difflib

    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    words = iter(argv)
    word = next((a for a in words if not (a.startswith("-") and (a != "--params" or next(words, None)))), None)
    if word is None or word in sub.choices:
        return None
    near = difflib.get_close_matches(word, sub.choices, n=3, cutoff=0.6)
    return (f"unknown command {word!r}" + (f"; did you mean {' or '.join(map(repr, near))}?" if near else "")
            + f" (commands: {', '.join(sub.choices)})")


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    if typo := _command_typo(parser, sys.argv[1:] if argv is None else argv):
        parser.error(typo)
    args, unknown = parser.parse_known_args(argv)
    if args.func is cmd_dvc_plots:
        args.dvc_args = unknown
    elif unknown:
        build_parser().error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.func is not None:
        args.func(args)
        return
    _, config = _read_params(args.params)
    _hold_workspace(f"maskbench {args.stage}")
    stage = STAGES[args.stage]
    wildcards = {name: getattr(args, name) for name in stage.wildcards}
    try:
        resolved = job(config, args.stage, wildcards)
    except KeyError as exc:
        sys.exit(f"error: {exc.args[0]}")
    if args.planned or os.environ.get(PLANNED_ENV):
        _require_plan(args, config, wildcards)
    log_path = Path(args.log or stage.log.format(**wildcards))
    _setup_logging(log_path)
    try:  # before anything imports torch: its libraries read the pins once, when they start
        logging.info("cpu_arithmetic: %s", cpu_mode.apply(config["cpu_arithmetic"]))
    except cpu_mode.CpuModeError as exc:
        sys.exit(f"error: {exc}")
    _claim_gpus(config, args.stage, wildcards)
    quiet_progress_bars()
    from maskbench import built  # what the job reads, stamped on its outputs when it finishes
    from maskbench.train.world import inside_world

    read = None if inside_world() else built.start(config, args.stage, wildcards)
    if args.stage == "pretrain":
        status = _launch_processes(config, wildcards["run"],
                                   [*(argv if argv is not None else sys.argv[1:]), "--log", str(log_path)])
        if status is not None:
            if status == 0:
                built.finish(args.stage, wildcards, read)
            sys.exit(status)
    preemption.install()
    try:
        STAGE_COMMANDS[args.stage](config, resolved, **({"fresh": args.fresh} if args.stage in RESUMABLE else {}))
        if read is not None:
            built.finish(args.stage, wildcards, read)
    except preemption.Preempted as stop:
        logging.error("%s: %s", stage.command(wildcards), stop)
        sys.exit(preemption.EXIT_CODE)
    except Exception as exc:  # the traceback goes to the job's log file as well as the console
        # a refused checkpoint: the message is the whole story (maskbench.train.fingerprint is loaded
        # only by the stages that checkpoint: the others' dvc.yaml deps leave it out)
        if isinstance(exc, getattr(sys.modules.get("maskbench.train.fingerprint"), "StaleCheckpoint", ())):
            logging.error("%s: %s", stage.command(wildcards), exc)
            sys.exit(1)
        logging.exception("%s failed", stage.command(wildcards))
        sys.exit(1)


if __name__ == "__main__":
    main()
