"""Shared fixtures: a small valid parameter set and a tiny trained tokenizer."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

from maskbench import paths

REPO = Path(__file__).resolve().parents[1]


def copy_workflow(path: Path) -> Path:
    """What a fresh clone has of the workflow (rules, params, code), copied to `path`."""
    path.mkdir(parents=True)
    for name in ("Snakefile", "dvc.yaml", "params.yaml"):
        shutil.copy(REPO / name, path / name)
    for name in ("workflow", "src"):
        shutil.copytree(REPO / name, path / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return path


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture
def raw_params() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch copy of the workflow definition (params, schema, rules, code) to run stages in."""
    shutil.rmtree(tmp_path)
    return copy_workflow(tmp_path)


def write_params(workdir: Path, params: dict) -> Path:
    path = workdir / "params.yaml"
    path.write_text(yaml.safe_dump(copy.deepcopy(params), sort_keys=False))
    return path


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory):
    from maskbench.data.tokenizers import train_wordpiece

    words = "the cat sat on the mat while a dog ran in the park and the bird sang".split()
    texts = [" ".join(words[i:] + words[:i]) for i in range(len(words))] * 5
    return train_wordpiece(texts, vocab_size=120, min_frequency=1, lowercase=True,
                           out_dir=tmp_path_factory.mktemp("tok") / "tokenizer")


def write_summary(root: Path, run: str, task: str, summary: dict) -> None:
    """A fine-tuning summary where the report stage looks for it."""
    path = root / paths.FINETUNE_SUMMARY.format(run=run, task=task)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(summary))


def table_summaries(config: dict, table: str, root: Path) -> dict[tuple[str, str], Path]:
    """Where the report stage reads the summary of each (run, task) cell of `table`, under `root`."""
    from maskbench.config import table_cells

    return {(r, t): root / paths.FINETUNE_SUMMARY.format(run=r, task=t) for r, t in table_cells(config, table)}


def finetune_outputs(out_dir: Path) -> tuple[Path, Path]:
    """The metrics and predictions files `finetune` writes, under `out_dir`."""
    return out_dir / "metrics.json", out_dir / "predictions.jsonl"
