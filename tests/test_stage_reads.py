"""What a stage reads of params.yaml is what the stage table declares (`maskbench.stages`), so
that Snakemake and DVC re-run a job when, and only when, a value it reads changes.

The table derives a stage's keys from whole entries (a task, a dataset, a run, a section) less
keys named as display-only or as deciding other stages; these tests check that against what
the code reads: fine-tuning run on params with an access log (`maskbench.config.ReadLog`)
reads no key its job's record leaves out, and an option added to an entry is in the record."""

from __future__ import annotations

import copy

import pytest

from maskbench.config import FINETUNE_SETTINGS_SOURCES, ReadLog, has_key
from maskbench.finetune import loop
from maskbench.job_params import values
from maskbench.stages import DISPLAY_ONLY, STAGES
from tests.helpers import checkpoint, config_with_probe_task, finetune_outputs, run_pretrain, smoke_config, task_files

# What a job may read that does not change its results: where it logs (MLflow) and under which
# profile, and the display-only keys of entries; a job on a pretrained run that does not
# declare its entry (fine-tuning, the controls) reads it only to tag its MLflow run.
PROVENANCE = ("tracking.", "profile")


def declares(stage: str, config: dict, w: dict, key: str) -> bool:
    """Whether the job's declaration (`Stage.reads`) covers `key`; a key read but unset (a
    `get` with a default), as the declaration would be once it is set (to a placeholder; where
    the declaration cannot be computed on one, as it is for the key's siblings in its entry)."""
    def covered(declared: list[str], key: str) -> bool:
        return any(key == d or key.startswith(f"{d}.") for d in declared)

    if has_key(config, key):
        return covered(STAGES[stage].reads(config, w), key)
    *parents, leaf = key.split(".")
    placed = copy.deepcopy(config)
    node = placed
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = {}
    try:
        return covered(STAGES[stage].reads(placed, w), key)
    except (KeyError, TypeError):  # e.g. a run's `seed_of`, which names another run
        entry = ".".join(parents)
        return any(d.startswith(f"{entry}.") for d in STAGES[stage].reads(config, w)) or covered(
            STAGES[stage].reads(config, w), entry)


# The controls take the settings they use from a task's merged fine-tuning settings
# (`config.finetune_settings`), which copies, and so logs as read, every setting; which of them
# each control uses is the stage table's CONTROLS_SKIP, not checked here.
MERGED = {"baseline", "probe"}


def undeclared(stage: str, config: dict, read: set[str], w: dict) -> set[str]:
    """The keys in `read` that the job's declaration does not cover, but for display and provenance."""
    display = {f"{section}.{name}.{key}" for section, keys in DISPLAY_ONLY.items() for name in config[section]
               for key in keys}
    merged = [source.format(task=w["task"]) for source in FINETUNE_SETTINGS_SOURCES] if stage in MERGED else []
    merged += ["pretrain.seeds"]  # copied with the run's settings; the instance's seed is in its name
    tags = ("runs.",) if not any(key.startswith("runs.") for key in STAGES[stage].reads(config, w)) else ()
    return {key for key in read if key not in display and key not in merged
            and not key.startswith((*PROVENANCE, *tags, *(f"{source}." for source in merged)))
            and not declares(stage, config, w, key)}


@pytest.fixture
def finetuning(tmp_path, tiny_tokenizer, raw_params, tracking_store):
    """A fine-tuning job of the smoke profile (a one-layer encoder, eight rows, one epoch):
    (params, its job's wildcards, a function that runs it on given params)."""
    checkpoint("mlm", tiny_tokenizer, tmp_path / "model")
    rows = [{"text": t, "text_pair": None, "label": i % 2}
            for i, t in enumerate(["the cat sat on the mat", "a dog ran in the park", "the bird sang",
                                   "the cat ran"] * 2)]
    task_files(tmp_path / "cls", {"train": rows, "dev": rows[:4], "test": rows[4:]}, "classification", ["no", "yes"])
    raw_params["profile"] = "smoke"
    config = config_with_probe_task(raw_params, {"kind": "classification", "metric": "accuracy",
                                                 "split": {"method": "random", "dev": 0.1, "test": 0.1, "seed": 0}})

    def run(params: dict) -> dict:
        return loop.finetune(params, "mlm", "probe", 1, tmp_path / "model", tmp_path / "cls/task",
                             tmp_path / "cls/card.json", tmp_path / "cls/download.json",
                             *finetune_outputs(tmp_path / "cls/out"), fresh=True)
    run.root = tmp_path
    return config, {"run": "mlm", "task": "probe", "seed": 1}, run


def test_fine_tuning_and_its_controls_read_only_what_their_stages_declare(finetuning, monkeypatch):
    """Fine-tuning, the summary of its seeds, the baselines and the probe of the same task, each
    run on the parameters with an access log: every key read is declared (or display-only); and
    fine-tuning made to read a key its stage does not declare fails the check."""
    from maskbench.controls.baselines import baselines
    from maskbench.controls.probe import probe
    from maskbench.eval.aggregate import aggregate

    config, w, run = finetuning
    root = run.root
    task = (root / "cls/task", root / "cls/card.json")
    jobs = {"finetune": (w, run),
            "aggregate": ({"run": "mlm", "task": "probe"},
                          lambda params: aggregate(params, "mlm", "probe", {1: metrics})),
            "baseline": ({"task": "probe"},
                         lambda params: baselines(params, "probe", *task, *finetune_outputs(root / "b"))),
            "probe": ({"run": "mlm", "task": "probe"},
                      lambda params: probe(params, "mlm", "probe", root / "model", *task,
                                           *finetune_outputs(root / "p")))}
    metrics = None  # the fine-tuning's, which the aggregate then summarises
    for stage, (wildcards, job) in jobs.items():
        logged = ReadLog(config)
        result = job(logged)
        metrics = result if stage == "finetune" else metrics
        assert logged.read, stage
        assert not undeclared(stage, config, logged.read, wildcards), stage
        if stage == "finetune":
            assert "finetune.settings.lr" in logged.read  # the log sees the merged settings read

    # fine-tuning made to read one more key, with the stage table untouched: the check names it
    grid_points = loop.grid_points
    monkeypatch.setattr(loop, "grid_points",
                        lambda params, task: (params["analysis"]["seed"], grid_points(params, task))[1])
    logged = ReadLog(config)
    run(logged)
    assert undeclared("finetune", config, logged.read, w) == {"analysis.seed"}


def test_an_option_added_to_an_entry_fine_tuning_reads_is_in_its_record(config):
    """A new option in a task's entry, its overrides, the fine-tuning settings or section re-runs
    fine-tuning in both tools (its record, an input of the job in each, changes) without touching
    the table; a task's label (display) or another seed does not."""
    config["tasks"]["probe"] = {**config["tasks"]["rotten_tomatoes"], "overrides": {"epochs": 1}}
    w = {"run": "mlm", "task": "probe", "seed": 1}
    before = copy.deepcopy(values(config, "finetune", w))
    for where in ("tasks.probe", "tasks.probe.overrides", "finetune.settings", "finetune"):
        node = config
        for part in where.split("."):
            node = node[part]
        node["new_option"] = 0.5
        assert values(config, "finetune", w) != before, where
        del node["new_option"]
    config["tasks"]["probe"]["label"] = "Probe (renamed)"
    config["finetune"]["seeds"] = [*config["finetune"]["seeds"], 99]
    assert values(config, "finetune", w) == before


def test_a_record_without_a_field_the_code_now_writes_is_refused_not_read_as_zero(tmp_path):
    """A pretraining record older than its code (no `valid_loss_floor`) or an alignment record
    without `transition_floor` gives a cell that says so and how to re-run, not a number."""
    import json

    from maskbench import paths
    from maskbench.report.analysis import own_mask_gap
    from maskbench.report.cells import PRETRAIN_FIELDS, pretrain_metrics
    from maskbench.report.missing import Missing

    record = tmp_path / paths.PRETRAIN_METRICS.format(run="exlm")
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"unigram_gap": 0.4, "unigram_loss": 7.0}))
    found = pretrain_metrics(tmp_path, "exlm")
    assert isinstance(found, Missing) and "lacks valid_loss_floor" in str(found)
    assert "maskbench pretrain --run exlm" in str(found)
    record.write_text(json.dumps({"unigram_gap": 0.4, "unigram_loss": 7.0, "valid_loss_floor": 1.1}))
    assert set(PRETRAIN_FIELDS) <= pretrain_metrics(tmp_path, "exlm").keys()
    gap = own_mask_gap("exlm", {"dag_nll": 6.0}, {"unigram_loss": 7.0}, field="dag_nll")
    assert isinstance(gap, Missing) and "no transition_floor" in str(gap) and "maskbench analyse --run exlm" in str(gap)
    assert own_mask_gap("exlm", {"dag_nll": 6.0, "transition_floor": 1.5}, {"unigram_loss": 7.0},
                        field="dag_nll") == 2.5


def test_pretraining_reads_only_what_its_stage_declares(corpus, tmp_path, tracking_store):
    """Three steps of the smoke profile's MLM on the tiny corpus, on parameters with an access log."""
    config = smoke_config()
    logged = ReadLog(config)
    run_pretrain(logged, "mlm", corpus, tmp_path / "pretrain")
    assert "pretrain.lr" in logged.read and "runs.mlm.objective" in logged.read
    assert not undeclared("pretrain", config, logged.read, {"run": "mlm"})
