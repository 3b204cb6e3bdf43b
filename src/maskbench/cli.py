"""`maskbench <stage>`: one subcommand per workflow stage, called alike by Snakemake and DVC.

Every subcommand reads and validates params.yaml first (a bad key stops it before anything
is touched), then reads and writes the fixed paths of `maskbench.paths`, and logs to
`logs/<stage>/<name>.log` as well as the console.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from maskbench import paths
from maskbench.config import ParamsError, corpus_datasets, load_params, task_seeds
from maskbench.io import read_json, write_json, write_text


def _setup_logging(log_path: Path) -> None:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[logging.StreamHandler(sys.stderr), logging.FileHandler(log_path, mode="w")],
        force=True,
    )
    for noisy in ("alembic", "mlflow", "urllib3", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def cmd_validate(config: dict, args) -> None:
    if args.stamp:
        # Fixed content: the stages after it depend on this file, and must not re-run because
        # params.yaml changed somewhere they do not read.
        write_json(Path(args.stamp), {"params": args.params, "valid": True})
    print(f"{args.params}: valid (profile {config['profile']})")


def cmd_download(config: dict, args) -> None:
    from maskbench.data.download import download

    _require(config["datasets"], args.dataset, "datasets")
    card = download(config, args.dataset, Path(paths.RAW.format(dataset=args.dataset)),
                    Path(paths.DOWNLOAD_CARD.format(dataset=args.dataset)), Path(paths.PIP_CACHE))
    logging.info("downloaded %s: %s", args.dataset, card["bytes"])


def cmd_tokenizer(config: dict, args) -> None:
    from maskbench.data.corpus import read_corpus
    from maskbench.data.tokenizers import train_tokenizer

    _require(config["corpora"], args.modality, "corpora")
    _require(config["tokenizer"], args.modality, "tokenizer")
    docs, _ = read_corpus(config, args.modality)
    tok = train_tokenizer(args.modality, config["tokenizer"][args.modality], docs["train"],
                          Path(paths.TOKENIZER.format(modality=args.modality)))
    logging.info("trained %s tokenizer on %d train documents: %d tokens", args.modality, len(docs["train"]), len(tok))


def cmd_tokenize(config: dict, args) -> None:
    from transformers import AutoTokenizer

    from maskbench.data.corpus import read_corpus, tokenize_corpus

    _require(config["corpora"], args.modality, "corpora")
    docs, datasets = read_corpus(config, args.modality)
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER.format(modality=args.modality))
    meta = tokenize_corpus(docs, tokenizer, Path(paths.TOKENS.format(modality=args.modality)))
    write_json(paths.TOKENS_CARD.format(modality=args.modality),
               {"corpus": corpus_datasets(config, args.modality), "datasets": datasets, **meta})
    logging.info("tokenized %s: %s", args.modality, meta["splits"])


def cmd_task(config: dict, args) -> None:
    from maskbench.data.tasks import prepare_task

    _require(config["tasks"], args.task, "tasks")
    dataset = config["tasks"][args.task]["dataset"]
    card = prepare_task(config, args.task, Path(paths.RAW.format(dataset=dataset)),
                        Path(paths.TASK.format(task=args.task)), Path(paths.TASK_CARD.format(task=args.task)))
    logging.info("prepared %s: rows %s, skipped %s", args.task, card["rows"], card["skipped"])


def cmd_pretrain(config: dict, args) -> None:
    from maskbench.train.pretrain import pretrain

    _require(config["runs"], args.run, "runs")
    modality = config["runs"][args.run]["modality"]
    cards = [Path(paths.DOWNLOAD_CARD.format(dataset=d)) for d in corpus_datasets(config, modality)]
    metrics = pretrain(config, args.run, Path(paths.TOKENS.format(modality=modality)),
                       Path(paths.TOKENIZER.format(modality=modality)), cards, Path(paths.PRETRAIN.format(run=args.run)))
    logging.info("pretrained %s: %s", args.run, metrics)


def cmd_finetune(config: dict, args) -> None:
    from maskbench.finetune.loop import finetune

    _require(config["runs"], args.run, "runs")
    _require(config["tasks"], args.task, "tasks")
    metrics = finetune(
        config, args.run, args.task, args.seed,
        Path(paths.PRETRAIN_MODEL.format(run=args.run)), Path(paths.TASK.format(task=args.task)),
        Path(paths.TASK_CARD.format(task=args.task)),
        Path(paths.DOWNLOAD_CARD.format(dataset=config["tasks"][args.task]["dataset"])),
        Path(paths.FINETUNE.format(run=args.run, task=args.task, seed=args.seed)),
    )
    test = "unlabelled" if metrics["test"] is None else f"{metrics['test']:.4f}"
    logging.info("fine-tuned %s on %s (seed %d): %s dev %.4f, test %s", args.run, args.task, args.seed,
                 metrics["metric"], metrics["dev"], test)


def cmd_aggregate(config: dict, args) -> None:
    from maskbench.finetune.aggregate import aggregate

    _require(config["runs"], args.run, "runs")
    _require(config["tasks"], args.task, "tasks")
    seed_metrics = {}
    for seed in task_seeds(config, args.task):
        path = Path(paths.FINETUNE_METRICS.format(run=args.run, task=args.task, seed=seed))
        if path.exists():
            seed_metrics[seed] = read_json(path)
    summary = aggregate(config, args.run, args.task, seed_metrics)
    write_json(paths.FINETUNE_SUMMARY.format(run=args.run, task=args.task), summary)
    logging.info("%s on %s: %s %s = %.4f over seeds %s", args.run, args.task, summary["aggregate"],
                 summary["metric"], summary["value"], list(summary["scores"]))


def cmd_report(config: dict, args) -> None:
    from maskbench.report.tables import render

    _require(config["tables"], args.table, "tables")
    write_text(paths.REPORT.format(table=args.table), render(config, args.table, Path.cwd()))
    logging.info("wrote %s", paths.REPORT.format(table=args.table))


def cmd_tracking_init(config: dict, args) -> None:
    from maskbench.train.tracking import ensure_store

    print(ensure_store(config["tracking"]["experiment"]))


def cmd_dvc_yaml(config: dict, args) -> None:
    from maskbench.workflow import render_dvc_yaml

    text = render_dvc_yaml(config)
    if args.check:
        if Path("dvc.yaml").read_text() != text:
            sys.exit("dvc.yaml is out of date with params.yaml; run `maskbench dvc-yaml` to regenerate it")
        print("dvc.yaml is up to date")
        return

    write_text("dvc.yaml", text)
    print("wrote dvc.yaml")


def _require(section: dict, name: str, key: str) -> None:
    if name not in section:
        sys.exit(f"error: {key}.{name} is not defined in params.yaml; expected one of {sorted(section)}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="maskbench", description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml", help="parameters file (default: params.yaml)")
    sub = parser.add_subparsers(dest="stage", required=True, metavar="STAGE")

    def stage(name, func, help, *options):
        p = sub.add_parser(name, help=help, description=help)
        for flag, kwargs in options:
            p.add_argument(flag, required=True, **kwargs)
        p.set_defaults(func=func)
        return p

    check = stage("validate", cmd_validate, "check params.yaml against the schema and print the active profile")
    check.add_argument("--stamp", metavar="PATH",
                       help=f"also write PATH once valid (dvc.yaml's first stage writes {paths.PARAMS_STAMP}, so a bad "
                            "params.yaml stops `dvc repro` before any stage removes its outputs)")
    stage("download", cmd_download, "fetch a dataset into data/raw/<dataset> and write its data card",
          ("--dataset", {"help": "a key of params.yaml `datasets`"}))
    stage("tokenizer", cmd_tokenizer, "train the tokenizer of a modality on its corpus's train split",
          ("--modality", {"choices": ["text", "smiles"], "help": "which corpus (params.yaml `corpora`)"}))
    stage("tokenize", cmd_tokenize, "write the token streams (memory-mapped) of a modality's corpus",
          ("--modality", {"choices": ["text", "smiles"], "help": "which corpus (params.yaml `corpora`)"}))
    stage("task", cmd_task, "normalise and split a downstream task's data",
          ("--task", {"help": "a key of params.yaml `tasks`"}))
    stage("pretrain", cmd_pretrain, "pretrain a named run (resumes from its last checkpoint)",
          ("--run", {"help": "a key of params.yaml `runs`"}))
    stage("finetune", cmd_finetune, "fine-tune a pretrained run on a task with one seed",
          ("--run", {"help": "a key of params.yaml `runs`"}), ("--task", {"help": "a key of params.yaml `tasks`"}),
          ("--seed", {"type": int, "help": "fine-tuning seed"}))
    stage("aggregate", cmd_aggregate, "summarise a run's fine-tuning on a task over seeds (and the grid)",
          ("--run", {"help": "a key of params.yaml `runs`"}), ("--task", {"help": "a key of params.yaml `tasks`"}))
    stage("report", cmd_report, "render reports/<table>.md from the fine-tuning metrics",
          ("--table", {"help": "a key of params.yaml `tables`"}))
    stage("tracking-init", cmd_tracking_init, "create the MLflow store and experiment (before parallel jobs)")
    dvc = stage("dvc-yaml", cmd_dvc_yaml, "regenerate dvc.yaml from params.yaml (same stages as the Snakefile)")
    dvc.add_argument("--check", action="store_true", help="only check that dvc.yaml is up to date")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        config = load_params(args.params)
    except ParamsError as exc:
        sys.exit(f"error: {exc}")
    if args.stage in paths.LOGS:
        _setup_logging(Path(paths.LOGS[args.stage].format(**vars(args))))
        _warn_if_dvc_yaml_is_stale(config)
    args.func(config, args)


def _warn_if_dvc_yaml_is_stale(config: dict) -> None:
    """`dvc repro` with a dvc.yaml made for other params runs the wrong stages; say so."""
    from maskbench.workflow import render_dvc_yaml

    dvc_yaml = Path("dvc.yaml")
    if dvc_yaml.exists() and dvc_yaml.read_text() != render_dvc_yaml(config):
        logging.warning("dvc.yaml does not match params.yaml (profile %s): run `maskbench dvc-yaml` before "
                        "`dvc repro`", config["profile"])


if __name__ == "__main__":
    main()
