"""How much pretraining a task needs before a pretrained encoder beats a random one.

For the MLM run of each modality, pretrain at several budgets (steps x tokens per step, each a
complete run with its own warmup and decay) and score each encoder on one task the way table1
does: fine-tuned over the task's seeds, and probed frozen (`maskbench probe`). Budget 0 is the
`none` control (the same encoder at its seeded random initialisation). Run it in a workspace
where the default workflow has run (`snakemake --cores all reports/table1.md`): the data are
read from there, and the budget of the default profile, like `none`, is read from the
workflow's own outputs instead of being trained again. Other budgets are written under
`runs-frontier/`.

    PYTHONPATH=src python benchmarks/frontier.py --run smiles_mlm --task bbbp --budgets 0 500 1000 1500
    PYTHONPATH=src python benchmarks/frontier.py --run mlm --task word_order --budgets 0 500 1000 1500

Each call adds its rows, with the recipe they were trained with (the default budget's settings;
`steps` is that default), to benchmarks/results/frontier_cpu.json
(docs/notes/2026-11-24-pretraining-budget.md; frontier_cpu_2026-11-23.json holds the rows of the
recipe before RoPE base 100).
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
from pathlib import Path

from maskbench import paths
from maskbench.config import corpus_datasets, load_params, run_settings, task_seeds
from maskbench.controls.probe import probe
from maskbench.finetune.loop import finetune
from maskbench.io import write_json
from maskbench.train.pretrain import PretrainFiles, pretrain

RESULTS = Path(__file__).parent / "results" / "frontier_cpu.json"


def budget_config(config: dict, run: str, steps: int) -> dict:
    """`config` with `run` pretrained for `steps` steps (warmup scaled with them)."""
    config = copy.deepcopy(config)
    overrides = config["runs"][run].setdefault("overrides", {})
    default = run_settings(config, run)
    overrides["steps"] = steps
    overrides["warmup_steps"] = max(1, round(default["warmup_steps"] * steps / default["steps"]))
    return config


def encoder_at(config: dict, run: str, steps: int, root: Path) -> tuple[str, Path, dict]:
    """(run name, model directory, config) of `run` pretrained for `steps` steps: the workflow's
    own run for the default budget and for 0 (its modality's `none` run), else trained here."""
    modality = config["runs"][run]["modality"]
    if steps == 0:
        control = next(r for r, spec in config["runs"].items()
                       if spec["objective"] == "none" and spec["modality"] == modality)
        return control, Path(paths.PRETRAIN_MODEL.format(run=control)), config
    if steps == run_settings(config, run)["steps"]:
        return run, Path(paths.PRETRAIN_MODEL.format(run=run)), config
    config = budget_config(config, run, steps)
    out = root / f"{run}-{steps}"
    model = out / "model"
    if not model.exists():
        pretrain(config, run, Path(paths.TOKENS.format(modality=modality)),
                 Path(paths.TOKENIZER.format(modality=modality)),
                 [Path(paths.DOWNLOAD_CARD.format(dataset=d)) for d in corpus_datasets(config, modality)],
                 PretrainFiles(model=model, metrics=out / "metrics.json", log_csv=out / "log.csv",
                               valid_csv=out / "valid.csv", checkpoint=out / "checkpoint"))
    return run, model, config


def scores(config: dict, name: str, model: Path, task: str, out: Path | None) -> dict:
    """Fine-tuned test scores over the task's seeds and the frozen probe's test score: read
    from the workflow's outputs when `out` is None, else computed into `out`."""
    task_dir, card = Path(paths.TASK.format(task=task)), Path(paths.TASK_CARD.format(task=task))
    data_card = Path(paths.DOWNLOAD_CARD.format(dataset=config["tasks"][task]["dataset"]))
    tuned = {}
    for seed in task_seeds(config, task):
        metrics = (Path(paths.FINETUNE_METRICS.format(run=name, task=task, seed=seed)) if out is None
                   else out / f"{name}/{task}/seed{seed}/metrics.json")
        if not metrics.exists():
            if out is None:
                raise FileNotFoundError(f"{metrics}: run the default workflow first (snakemake --cores all "
                                        "reports/table1.md)")
            finetune(config, name, task, seed, model, task_dir, card, data_card, metrics,
                     metrics.with_name("predictions.jsonl"))
        tuned[seed] = json.loads(metrics.read_text())["test"]
    probed = Path(paths.PROBE_METRICS.format(run=name, task=task)) if out is None else out / f"{name}/{task}/probe.json"
    if not probed.exists():
        if out is None:
            raise FileNotFoundError(f"{probed}: run the default workflow first (snakemake --cores all "
                                    "reports/table1.md)")
        probe(config, name, task, model, task_dir, card, probed, probed.with_name("probe.jsonl"))
    values = list(tuned.values())
    return {"finetuned": {"seeds": tuned, "mean": statistics.mean(values),
                          "std": statistics.stdev(values) if len(values) > 1 else 0.0},
            "probe": json.loads(probed.read_text())["value"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="an MLM run of params.yaml, e.g. mlm or smiles_mlm")
    parser.add_argument("--task", required=True)
    parser.add_argument("--budgets", type=int, nargs="+", required=True, help="pretraining steps; 0 = none")
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()
    config = load_params(args.params)
    settings = run_settings(config, args.run)
    tokens_per_step = settings["batch_size"] * settings["seq_len"]
    rows = []
    for steps in args.budgets:
        name, model, budget = encoder_at(config, args.run, steps, Path("runs-frontier/pretrain"))
        trained_here = steps not in (0, settings["steps"])
        out = Path(f"runs-frontier/finetune/{args.run}-{steps}") if trained_here else None
        result = scores(budget, name, model, args.task, out)
        rows.append({"steps": steps, "tokens": steps * tokens_per_step, "encoder": str(model), **result})
        print(f"{args.run} {args.task} steps={steps}: fine-tuned {result['finetuned']['mean']:.3f} "
              f"± {result['finetuned']['std']:.3f}, probe {result['probe']:.3f}", flush=True)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    recipe = {key: settings[key] for key in ("lr", "warmup_steps", "rope_base", "batch_size", "seq_len", "steps")}
    results[f"{args.run}/{args.task}"] = {"metric": config["tasks"][args.task]["metric"], "profile": config["profile"],
                                          "recipe": recipe, "machine": platform.processor() or platform.machine(),
                                          "budgets": rows}
    write_json(RESULTS, results)


if __name__ == "__main__":
    main()
