"""Shared fixtures and helpers: the parameters (raw and validated), a tiny trained tokenizer, a
tiny tokenized corpus and sentence-classification task, a scratch MLflow store, SQuAD 2.0 rows; the
files stages read and write, a stand-in for the Hugging Face hub, and running a command."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import yaml

from maskbench import paths
from maskbench.objectives.cards import CARDS
from tests.samples import SQUAD_V2

REPO = Path(__file__).resolve().parents[1]
# Every `dvc` command the tests run would start a daemon sending usage analytics (a Python
# process each, retrying a network this machine may not reach): the tests' DVC sends none.
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

# Every objective, from its card (src/maskbench/objectives/cards.py): the tests parametrised by
# objective take these lists, so a new card is tested without a test file naming it.
OBJECTIVE_NAMES = sorted(CARDS)
PRETRAINED_OBJECTIVES = sorted(name for name, card in CARDS.items() if card.pretrains)
# Knobs of each objective's test model, over its card's defaults: small (one decoder layer) and
# masking a quarter of a 16-token block. An objective left out is tested at its card's defaults.
TEST_KNOBS = {"mlm": {"mask_ratio": 0.25}, "repeated_mlm": {"k": 2, "mask_ratio": 0.25},
              "mae_lm": {"mask_ratio": 0.25, "decoder_layers": 1, "delta": 0.0},
              "exlm": {"k": 2, "mask_ratio": 0.25}, "dar": {"t": 2}}


def objective_run(objective: str, knobs: dict | None = None) -> dict:
    """A `runs.<name>` entry of `objective` with its test knobs (`knobs` in their place)."""
    return {"objective": objective, "knobs": TEST_KNOBS.get(objective, {}) if knobs is None else knobs}


def copy_workflow(path: Path) -> Path:
    """What a fresh clone has of the workflow (rules, params, code), copied to `path`."""
    path.mkdir(parents=True)
    for name in ("Snakefile", "dvc.yaml", "params.yaml"):
        shutil.copy(REPO / name, path / name)
    for name in ("workflow", "src"):
        shutil.copytree(REPO / name, path / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return path


def smoke_copy(path: Path) -> Path:
    """A copy of the workflow (what a fresh clone has) switched to the smoke profile."""
    copy_workflow(path)
    params = yaml.safe_load((path / "params.yaml").read_text())
    params["profile"] = "smoke"
    (path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["maskbench", "dvc-yaml"], path)  # the smoke profile's tables need other stages
    return path


@pytest.fixture(scope="session")
def smoke_table1(tmp_path_factory) -> Path:
    """`snakemake --cores 2 reports/table1.md` on the smoke profile, built once for the session:
    the end-to-end, DVC-handoff and two-tools tests each work on a copy (`copy_build`), so the
    suite pays for one smoke build instead of three."""
    root = smoke_copy(tmp_path_factory.mktemp("smoke-table1") / "project")
    run(["snakemake", "--cores", "2", "reports/table1.md"], root)
    return root


def copy_build(build: Path, dest: Path) -> Path:
    """A copy of a built project that keeps the files' times, so Snakemake sees it as built."""
    shutil.copytree(build, dest, symlinks=True)
    return dest


@pytest.fixture(autouse=True)
def tracking_uri_is_not_left_behind():
    """A test that leaves MLFLOW_TRACKING_URI in the environment sends every later test's runs
    (and the jobs they start) to its store: fail the test that did it, not the one that suffers."""
    import os

    before = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    assert os.environ.get("MLFLOW_TRACKING_URI") == before, "this test left MLFLOW_TRACKING_URI changed"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture
def raw_params() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


@pytest.fixture
def config(raw_params) -> dict:
    """params.yaml, validated (its default profile applied)."""
    from maskbench.config import read_yaml, schema_path, validate

    return validate(raw_params, read_yaml(schema_path()))


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


def finetune_outputs(out_dir: Path) -> tuple[Path, Path]:
    """The metrics and predictions files `finetune` writes, under `out_dir`."""
    return out_dir / "metrics.json", out_dir / "predictions.jsonl"


def seeded_draws(objective, tokens, seed: int) -> dict:
    """The objective's random choices for `tokens`, drawn from a generator seeded with `seed`."""
    import torch

    return objective.draw(tokens, torch.Generator().manual_seed(seed))


def objective_step(objective, tokens, seed: int):
    """One training step's output, as pretraining makes it: the objective's random choices
    drawn from a generator seeded with `seed`, then its loss given them."""
    return objective(tokens, seeded_draws(objective, tokens, seed))


def objective_inspection(objective, tokens, seed: int, hidden_states: bool = False):
    """What the analyses read of the step `objective_step` takes with the same `seed`."""
    return objective.inspect(tokens, seeded_draws(objective, tokens, seed), hidden_states)


@pytest.fixture(scope="session")
def empty_tracking_store(tmp_path_factory) -> Path:
    """An MLflow SQLite store with its tables made and nothing in them. Making the tables
    (MLflow's migrations) takes seconds, so it is done once a session and copied per module."""
    from mlflow import MlflowClient

    db = tmp_path_factory.mktemp("mlflow-empty") / "mlflow.db"
    MlflowClient(f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture(scope="module")
def tracking_store(tmp_path_factory, empty_tracking_store):
    """MLflow runs go to a scratch SQLite store of this module's own, not the repository's
    (`pytestmark = usefixtures`): tests count the runs of their module."""
    db = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    shutil.copyfile(empty_tracking_store, db)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
        yield


@pytest.fixture(scope="session")
def task_tokenizers(tmp_path_factory) -> dict[str, Path]:
    """The task stage's tokenizer input, one per modality, reading any ASCII text or well-formed
    SMILES without [UNK] (every printable character is in the WordPiece vocabulary, the SMILES
    alphabet in the SMILES one): for tests that are not about unknown tokens."""
    import string

    from maskbench.data.smiles import train_smiles_tokenizer
    from maskbench.data.tokenizers import train_wordpiece

    root = tmp_path_factory.mktemp("task_tokenizers")
    train_wordpiece([" ".join(string.printable.strip()), "the cat sat"], vocab_size=200, min_frequency=1,
                    lowercase=True, out_dir=root / "text")
    train_smiles_tokenizer(["CCO"], root / "smiles")
    return {"text": root / "text", "smiles": root / "smiles"}


def tiny_documents() -> dict[str, list[str]]:
    """40 train, 5 valid and 5 test documents of 60 random words (seeded: the same every run)."""
    rng = np.random.default_rng(0)
    words = "the cat sat on mat while a dog ran in park and bird sang".split()
    return {s: [" ".join(rng.choice(words, 60)) for _ in range(n)]
            for s, n in (("train", 40), ("valid", 5), ("test", 5))}


def write_tiny_corpus(tokenizer, tokens: Path, tokenizer_dir: Path, card: Path) -> None:
    """`tiny_documents` as the data stages leave a corpus: token streams, tokenizer, download card."""
    from maskbench.data.corpus import tokenize_corpus

    tokenize_corpus(tiny_documents(), tokenizer, tokens)
    tokenizer.save_pretrained(tokenizer_dir)
    card.parent.mkdir(parents=True, exist_ok=True)
    card.write_text(json.dumps({"source": {"files": {"train.raw.gz": "0" * 64}}}))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tiny_tokenizer):
    """Token streams, tokenizer and data card of a tiny corpus, as the data stages write them.
    SMILES runs read it too: the loop only sees token ids."""
    root = tmp_path_factory.mktemp("corpus")
    write_tiny_corpus(tiny_tokenizer, root / "tokens", root / "tokenizer", root / "card.json")
    return root


def pretrain_workdir(root: Path, tokenizer, **pretrain) -> Path:
    """A workflow copy under the smoke profile (40 steps, a checkpoint every 5, or the `pretrain`
    settings given) whose data stages have run on the tiny corpus: what `maskbench pretrain` reads."""
    root.mkdir(parents=True)
    shutil.copytree(REPO / "workflow", root / "workflow")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["profile"] = "smoke"
    params["profiles"]["smoke"]["pretrain"].update({"steps": 40, "checkpoint_every": 5, "seq_len": 32, **pretrain})
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    write_tiny_corpus(tokenizer, root / "data/tokens/text", root / "data/tokenizer/text",
                      root / "data/cards/download-wikitext2.json")
    return root


# `maskbench <argv>` that sends itself `signum` during the `at_step`-th optimizer step of the
# loop in `module` (pretraining's or fine-tuning's): a signal sent from outside after a sleep or
# a poll races training, which on a fast machine runs the smoke profile's 150 steps within a second.
_SIGNALLED = """
import os, runpy, sys
import {module} as loop
step_once, calls = loop.optimizer_step, []
def step_then_signal(*args, **kwargs):
    calls.append(1)
    if len(calls) == {at_step}:
        os.kill(os.getpid(), {signum})
    return step_once(*args, **kwargs)
loop.optimizer_step = step_then_signal
sys.argv = {argv!r}
runpy.run_module("maskbench.cli", run_name="__main__")
"""


def stage_signalled(root: Path, module: str, argv: list[str], signum: int, at_step: int,
                    env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `maskbench <argv>` in `root`, sending the process `signum` while the `at_step`-th
    step of `module`'s loop runs. The script imports torch before the CLI could pin its CPU
    paths, so under `cpu_arithmetic: reproducible` the process starts pinned (maskbench.cpu_mode),
    as a `maskbench` command would be by the time it computes."""
    from maskbench.config import read_params
    from maskbench.cpu_mode import PINS

    script = _SIGNALLED.format(module=module, argv=["maskbench", *argv], at_step=at_step, signum=int(signum))
    if read_params(str(root / "params.yaml"))[1]["cpu_arithmetic"] == "reproducible":
        env = {**(os.environ if env is None else env), **PINS}
    return subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, env=env)


def pretrain_signalled(root: Path, signum: int, at_step: int) -> subprocess.CompletedProcess:
    """Pretrain `mlm` in `root`, sending the process `signum` while its `at_step`-th step runs."""
    return stage_signalled(root, "maskbench.train.pretrain", ["pretrain", "--run", "mlm"], signum, at_step)


def task_files(root: Path, rows_by_split: dict, kind: str, label_names=None) -> None:
    """A task as the task stage leaves it, under `root`: task/<split>.jsonl, card.json, download.json."""
    (root / "task").mkdir(parents=True)
    for split, rows in rows_by_split.items():
        (root / "task" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "card.json").write_text(json.dumps({"kind": kind, "label_names": label_names}))
    (root / "download.json").write_text(json.dumps({"source": {"files": {"x": "0" * 64}}}))


@pytest.fixture(scope="module")
def probe_task(tmp_path_factory):
    """A tiny sentence-classification task in the task stage's layout."""
    root = tmp_path_factory.mktemp("probe")
    texts = ["the cat sat on the mat", "a dog ran in the park", "the bird sang", "the cat ran"]
    rows = [{"text": t, "text_pair": None, "label": i % 2} for i, t in enumerate(texts * 2)]
    task_files(root, {"train": rows, "dev": rows[:4], "test": rows[4:]}, "classification", ["no", "yes"])
    return root


@pytest.fixture
def squad_rows(tmp_path):
    """`SQUAD_V2` through the official-JSON reader: q1, q2 and the unanswerable q3."""
    from maskbench.data.squad import read_squad_json

    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps(SQUAD_V2))
    rows, skipped = read_squad_json(path)
    assert skipped == {"answer_not_at_answer_start": 1}  # q4's offset points elsewhere
    return rows


class FakeHubSplit(list):
    """What `datasets.load_dataset` returns per split, as far as the `hf` source uses it."""

    def to_json(self, path, lines, force_ascii):
        Path(path).write_text("".join(json.dumps(r) + "\n" for r in self))


def fake_hub(monkeypatch, hub: dict):
    """`datasets.load_dataset` serves `hub` ({(repo, config): {split: records}}); returns its calls."""
    calls = []

    def load_dataset(repo, config=None, revision=None):
        calls.append((repo, config, revision))
        return {split: FakeHubSplit(records) for split, records in hub[repo, config].items()}

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    return calls


def run(cmd: list[str], cwd: Path) -> str:
    """Run `cmd` in `cwd`; fail the test with the end of its output unless it succeeds."""
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result.stdout + result.stderr
