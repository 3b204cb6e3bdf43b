"""A job's stamp of what it was built from, and the Snakefile's verdict on it (maskbench.built):
stale exactly when the parameters, code or upstream builds it read differ from today's."""

from __future__ import annotations

import json
import os
import time

import pytest

from maskbench import built, paths
from tests.helpers import copy_workflow, use_profile

FINETUNE = ("finetune", {"run": "mlm", "task": "rotten_tomatoes", "seed": 1})
AGGREGATE = ("aggregate", {"run": "mlm", "task": "rotten_tomatoes"})


@pytest.fixture
def smoke(tmp_path):
    root = copy_workflow(tmp_path / "project")
    return root, use_profile(root, "smoke")


def build(config, root, stage, w):
    """What a `maskbench <stage>` command does around its work."""
    built.finish(stage, w, built.start(config, stage, w, root), root)


def mark(root, stage, w) -> dict:
    return json.loads((root / built.stale_path(stage, w)).read_text())


def test_a_job_built_with_todays_inputs_is_marked_up_to_date_and_dated_the_oldest_time(smoke):
    root, config = smoke
    build(config, root, *FINETUNE)
    assert built.job_name(*FINETUNE) not in built.write_stale_marks(config, root)
    assert mark(root, *FINETUNE) == {"stale": []}
    assert os.stat(root / built.stale_path(*FINETUNE)).st_mtime == 0  # never newer than an output


def test_a_changed_value_then_its_revert(smoke):
    """The revert case: built with lr 4e-4 (by either tool), params.yaml back at 5e-4: stale,
    though the parameter record holds again what Snakemake last read."""
    root, config = smoke
    original = config["tasks"]["rotten_tomatoes"].get("overrides", {}).get("lr")
    config["tasks"]["rotten_tomatoes"].setdefault("overrides", {})["lr"] = 4e-4
    build(config, root, *FINETUNE)
    built.write_stale_marks(config, root)
    assert mark(root, *FINETUNE) == {"stale": []}
    config["tasks"]["rotten_tomatoes"]["overrides"]["lr"] = original if original is not None else 5e-4
    before = time.time()
    assert built.job_name(*FINETUNE) in built.write_stale_marks(config, root)
    assert mark(root, *FINETUNE)["stale"] == ["its params changed since it was built"]
    assert os.stat(root / built.stale_path(*FINETUNE)).st_mtime >= before - 1
    # a second look writes a new mark: a checksum Snakemake has not recorded for the job
    first = (root / built.stale_path(*FINETUNE)).read_text()
    built.write_stale_marks(config, root)
    assert (root / built.stale_path(*FINETUNE)).read_text() != first


def test_a_rebuilt_input_makes_its_readers_stale_and_only_them(smoke):
    root, config = smoke
    for w in ({"run": "mlm", "task": "rotten_tomatoes", "seed": s} for s in (1, 2, 3)):
        build(config, root, "finetune", w)
    build(config, root, *AGGREGATE)
    assert built.job_name(*AGGREGATE) not in built.write_stale_marks(config, root)
    build(config, root, *FINETUNE)  # seed 1 re-run alone (`dvc repro finetune-mlm-rotten_tomatoes-seed1`)
    stale = built.write_stale_marks(config, root)
    assert stale == [built.job_name(*AGGREGATE)]
    assert mark(root, *AGGREGATE)["stale"] == ["finetune-mlm-rotten_tomatoes-seed1 was rebuilt since"]


def test_a_run_that_did_not_finish_is_stale(smoke):
    root, config = smoke
    build(config, root, *FINETUNE)
    built.start(config, *FINETUNE, root)  # and then killed
    built.write_stale_marks(config, root)
    assert "did not finish" in mark(root, *FINETUNE)["stale"][0]


def test_changed_code_makes_a_stage_stale(smoke, monkeypatch):
    root, config = smoke
    build(config, root, *FINETUNE)
    real = built.code_hashes
    monkeypatch.setattr(built, "code_hashes", lambda stage: {**real(stage), "src/maskbench/x.py": "0"})
    built.write_stale_marks(config, root)
    assert mark(root, *FINETUNE)["stale"] == ["its code changed since it was built"]


def test_a_job_without_a_stamp_is_left_to_snakemake(smoke):
    """Never built, or built before stamps existed: no verdict of ours."""
    root, config = smoke
    assert built.write_stale_marks(config, root) == []
    assert not (root / paths.BUILT_STAMP.format(job=built.job_name(*FINETUNE))).exists()
