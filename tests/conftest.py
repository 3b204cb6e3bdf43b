"""Shared fixtures: the parameters (raw and validated), a tiny trained tokenizer, a tiny tokenized
corpus and sentence-classification task, a scratch MLflow store, SQuAD 2.0 rows, a scratch copy of
the workflow and the session's one smoke build. The helpers the tests call are in helpers.py."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import RAW_PARAMS, REPO, copy_workflow, run, smoke_copy, task_files, validated, write_tiny_corpus
from tests.samples import SQUAD_V2

# Every `dvc` command the tests run would start a daemon sending usage analytics (a Python
# process each, retrying a network this machine may not reach): the tests' DVC sends none.
os.environ.setdefault("DVC_NO_ANALYTICS", "1")


@pytest.fixture(scope="session")
def smoke_table1(tmp_path_factory) -> Path:
    """`snakemake --cores 2 reports/table1.md` on the smoke profile, built once for the session:
    the end-to-end, DVC-handoff and two-tools tests each work on a copy (`copy_build`), so the
    suite pays for one smoke build instead of three."""
    root = smoke_copy(tmp_path_factory.mktemp("smoke-table1") / "project")
    run(["snakemake", "--cores", "2", "reports/table1.md"], root)
    return root


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
    """params.yaml as read (parsed once a session: its 1,100 lines take a good part of a
    second), each test's own copy to change as it likes."""
    return copy.deepcopy(RAW_PARAMS)


@pytest.fixture
def config(raw_params) -> dict:
    """params.yaml, validated (its default profile applied)."""
    return validated(raw_params)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch copy of the workflow definition (params, schema, rules, code) to run stages in."""
    shutil.rmtree(tmp_path)
    return copy_workflow(tmp_path)


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory):
    from maskbench.data.tokenizers import train_wordpiece

    words = "the cat sat on the mat while a dog ran in the park and the bird sang".split()
    texts = [" ".join(words[i:] + words[:i]) for i in range(len(words))] * 5
    return train_wordpiece(texts, vocab_size=120, min_frequency=1, lowercase=True,
                           out_dir=tmp_path_factory.mktemp("tok") / "tokenizer")


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


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tiny_tokenizer):
    """Token streams, tokenizer and data card of a tiny corpus, as the data stages write them.
    SMILES runs read it too: the loop only sees token ids."""
    root = tmp_path_factory.mktemp("corpus")
    write_tiny_corpus(tiny_tokenizer, root / "tokens", root / "tokenizer", root / "card.json")
    return root


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
