"""MLflow tracking: one run per pretraining and per fine-tuning job.

The default store is a SQLite file at the repository root, addressed by absolute path so
every job (whatever its working directory) writes to the same DB. A fresh SQLite store is
created and migrated once under a file lock: concurrent first-time jobs otherwise race on
the schema migration and fail. `MLFLOW_TRACKING_URI` overrides the store.

MLflow stores artifact locations as absolute paths, fixed when the experiment and each run
are created. The default store keeps its artifacts in the workspace (`mlartifacts/`), so a
copied or moved workspace would write into the original's: each job therefore moves the
store's locations to the workspace it runs in, if they point into another (`relocate_artifacts`).

Metric names say what was measured (`train_loss`, `valid_loss`, `dev_accuracy`, `test_roc_auc`),
never which job measured it: the run, task and seeds are tags, so runs of several seeds or
objectives overlay in one chart. Values fixed for a run (parameter counts, steps) are params.
Every fine-tuning run also logs its headline score as `score`, which the experiment's saved view
"Scores" (`SCORES_VIEW`) shows beside the tags in the runs table.

A tracking server costs a job at most a bounded wait (docs/mlflow.md "When the server is down").
MLflow's own HTTP policy (7 retries of up to 120 s each) stalls a job 4-12 minutes per call, so
the job sets a short one (`HTTP_POLICY`; the user's own MLFLOW_HTTP_REQUEST_* values win). A
server that does not answer when the job starts fails the job, naming the URI and how to work
offline; one that stops answering mid-run costs one such wait, then the job trains on without it:
its metrics, params and tags wait in order (`Tracker.pending`; every metric is in the job's own
log files too) and are sent when the run ends, if the server is back by then.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import sqlite3
import time
from pathlib import Path

from maskbench.io import inside, reading

DEFAULT_DB = "mlflow.db"

# MLflow's HTTP retry policy for a tracking server: at most 2 retries (1 s, then 2 s apart), 5 s per
# attempt, so a dead server costs under 20 s per call, and the job pays it once.
HTTP_POLICY = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
               "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.5", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}


class TrackingUnavailable(RuntimeError):
    """The tracking store does not answer when a job opens its run."""


def _is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))

# The runs table's saved view: MLflow's UI lists an experiment's saved views, each an experiment
# tag `mlflow.sharedViewState.<key>` holding the view's name and state (its columns), and opens
# one at `#/experiments/<id>/runs?viewStateShareKey=<key>`. Column keys are `<kind>.`<name>``.
SCORES_VIEW = "scores"
# A fine-tuning's score in % as the tables print it (`score_percent`; an RMSE task's as is, `score`).
SCORES_COLUMNS = ["tags.`stage`", "tags.`run`", "tags.`pretraining_seed`", "tags.`task`", "tags.`seed`",
                  "metrics.`score_percent`", "metrics.`valid_loss`", "metrics.`score`", "tags.`dvc_experiment`"]


def tracking_uri(root: Path | None = None) -> str:
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{(Path(root or Path.cwd()) / DEFAULT_DB).resolve()}"


def ensure_store(experiment: str, root: Path | None = None) -> str:
    """Create the store and the experiment if needed (safe to call from parallel jobs)."""
    import mlflow

    root = Path(root or Path.cwd()).resolve()
    chosen_by_user = bool(os.environ.get("MLFLOW_TRACKING_URI"))  # read before set_tracking_uri exports ours
    uri = tracking_uri(root)
    mlflow.set_tracking_uri(uri)
    if _is_server(uri):
        for name, value in HTTP_POLICY.items():
            os.environ.setdefault(name, value)
        _require_answer(mlflow, uri)
    if not chosen_by_user:
        # MLflow exports the URI to os.environ for subprocesses; left there, it would read as
        # the user's choice to the next call (another root in this process) and to every job
        # this process starts, which must each find the store at their own root.
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    with _store_readable(uri):
        lock_path = root / f"{DEFAULT_DB}.lock"
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            # Our default store keeps artifacts beside it; a store the user chose (a tracking
            # server) decides where its artifacts go.
            location = None if chosen_by_user else artifact_location(root, experiment)
            found = mlflow.get_experiment_by_name(experiment)
            if found is None:
                # A model-training experiment: MLflow 3's UI then opens it on its runs table, not
                # on the GenAI traces overview (which stays empty here).
                mlflow.create_experiment(experiment, artifact_location=location,
                                         tags={"mlflow.experimentKind": "custom_model_development", **scores_view()})
            else:
                if location is not None and found.artifact_location != location:
                    relocate_artifacts(root / DEFAULT_DB, found.artifact_location, location)
                for key, value in scores_view().items():
                    if key not in found.tags:  # a store made before the view existed
                        mlflow.MlflowClient().set_experiment_tag(found.experiment_id, key, value)
        mlflow.set_experiment(experiment)
    return uri


class TrackingStoreDamaged(RuntimeError):
    """The SQLite store cannot be read: its file is damaged."""


class TrackingStoreUnwritable(RuntimeError):
    """The SQLite store, or the folder it is in, cannot be written by this user."""


DAMAGED_DB = ("malformed", "file is not a database", "database disk image")
# SQLite's words for a store it may not write: the file is read-only, or its folder is (SQLite
# writes a journal beside the store)
UNWRITABLE_DB = ("readonly database", "unable to open database file")


@contextlib.contextmanager
def _store_readable(uri: str):
    """Name a damaged or unwritable SQLite store and the ways out (SQLite's own message names
    no file)."""
    try:
        yield
    except Exception as exc:
        if not uri.startswith("sqlite:///"):
            raise
        db = uri.removeprefix("sqlite:///")
        beside = isinstance(exc, PermissionError) and Path(exc.filename or "").parent == Path(db).parent
        if beside or (any(text in str(exc) for text in UNWRITABLE_DB) and Path(db).parent.is_dir()):
            raise TrackingStoreUnwritable(
                f"{db}: the MLflow store cannot be written ({str(exc).splitlines()[0][:200]}). Fix the permission: "
                f"this user must be able to write {db} and its folder {Path(db).parent} (SQLite writes a journal and "
                "the jobs a lock beside it), e.g. `chmod u+w` both as their owner; or run without tracking: "
                "MASKBENCH_TRACKING=off (every job's results are in its own output files all the same)") from None
        if not any(text in str(exc) for text in DAMAGED_DB):
            raise
        raise TrackingStoreDamaged(
            f"{db}: the MLflow store is damaged ({str(exc).splitlines()[0][:200]}). Every job's results are also in "
            f"its own output files, which this does not touch. Restore the store from a backup if you have one, "
            f"or set it aside and start a new one, which the next job then fills: `mv {db} {db}.damaged && maskbench "
            f"tracking-init` (`sqlite3 {db}.damaged .recover | sqlite3 recovered.db` may save its runs)") from None


def _require_answer(mlflow, uri: str) -> None:
    """Fail now, within HTTP_POLICY's wait, if the tracking server does not answer."""
    try:
        mlflow.MlflowClient().search_experiments(max_results=1)
    except Exception as exc:
        raise TrackingUnavailable(
            f"MLflow tracking server {uri} (MLFLOW_TRACKING_URI) does not answer: {str(exc)[:300]}. Start it, or work "
            f"offline: unset MLFLOW_TRACKING_URI and the job tracks into {DEFAULT_DB} at the repository root "
            "(docs/mlflow.md says how to copy those runs to the server later)") from None


def scores_view() -> dict[str, str]:
    """The experiment tag of the saved view "Scores": the runs table with the job's tags and its
    headline numbers (a fine-tuning run's `score_percent`, a pretraining run's `valid_loss`)."""
    state = json.dumps({"selectedColumns": SCORES_COLUMNS})
    now = int(time.time() * 1000)
    envelope = {"name": "Scores", "createdAt": now, "updatedAt": now, "state": state}
    return {f"mlflow.sharedViewState.{SCORES_VIEW}": json.dumps(envelope)}


def run_name(job: str) -> str:
    """The MLflow run name of `job` (`finetune/mlm/boolq/seed1`): under `dvc exp run`, which
    sets DVC_EXP_NAME, the experiment's name is added (`...@<experiment>`), so an
    experiment's runs are told apart from the workspace's."""
    experiment = os.environ.get("DVC_EXP_NAME")
    return f"{job}@{experiment}" if experiment else job


def pretraining_tags(config: dict, run: str) -> dict[str, str]:
    """Which declared run, and which of its pretraining seeds, the pretrained instance `run`
    is (`mlm-pseed1`: run `mlm`, pretraining seed 1; config.add_pretraining_seeds): tags that
    overlay an instance's runs with its seeds'. A run params.yaml does not name (a test's own
    checkpoint) is its own declared run, seed 0."""
    spec = config["runs"].get(run, {})
    return {"run": spec.get("seed_of", run), "pretraining_seed": str(spec.get("pretraining_seed", 0))}


def artifact_location(root: Path, experiment: str) -> str:
    """Where the default store at `root` keeps an experiment's artifacts: a folder named by
    params.yaml's tracking.experiment, which must lie inside mlartifacts/."""
    return inside(root / "mlartifacts", experiment, "tracking.experiment").as_uri()


def relocate_artifacts(db: Path, old: str, new: str) -> None:
    """Move the artifact locations of the store `db` from `old` (the experiment's, in the
    workspace the store was made in, before it was copied or moved) to `new` (this
    workspace's): the experiment's, its runs' and its logged models'. MLflow has no call that
    changes an artifact location, so its columns are rewritten; the artifacts logged so far came
    with the copy."""
    with contextlib.closing(sqlite3.connect(db)) as connection, connection:
        connection.execute("UPDATE experiments SET artifact_location = ? WHERE artifact_location = ?", (new, old))
        for table, column in (("runs", "artifact_uri"), ("logged_models", "artifact_location")):
            connection.execute(f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                               f"WHERE substr({column}, 1, ?) = ?", (new, len(old) + 1, len(old) + 1, old + "/"))
    logging.getLogger(__name__).warning("MLflow store %s was made in another workspace: its artifacts now go under "
                                        "%s, not %s", db, new, old)


# what MLflow allows in a param's name
PARAM_NAME = re.compile(r"[\w\-. :/]+")


def flatten(params: dict, prefix: str = "") -> dict[str, str]:
    """Nested params as dotted keys, values as strings (MLflow params are flat strings). A dict
    keyed by data rather than by names (a task card's commonest [UNK] strings: "`", "[C@H]")
    stays one param holding its JSON: MLflow refuses such keys, and the job with them."""
    flat = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and all(PARAM_NAME.fullmatch(str(k)) for k in value):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = (json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else str(value))[:500]
    return flat


def _record_model(name: str, model_type: str, step: int, tags: dict[str, str]) -> None:
    """An external LoggedModel (MLflow keeps no weights, only where they are) as the active
    run's output at `step` (Tracker.record_model)."""
    import mlflow
    from mlflow.entities import LoggedModelOutput

    model = mlflow.create_external_model(name=name, model_type=model_type, tags=tags)
    mlflow.log_outputs(models=[LoggedModelOutput(model.model_id, step=step)])


class Untracked:
    """MLflow's place in a Tracker when tracking is off: every call does nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class Tracker:
    """A thin MLflow run: start (or resume) it, log metrics and params, finish with a status.
    `job` names the run (`run_name`); under `dvc exp run` the experiment's name is also its
    `dvc_experiment` tag.

    Used as a context manager, the run's status always says how the job ended: FINISHED when
    the block completes, FAILED (with the error as the `error` tag) when it raises, KILLED when
    it is interrupted (Ctrl-C, or SystemExit).

    Once a call to the store fails mid-run (the server died, after HTTP_POLICY's retries), the
    tracker stops calling it: what the job logs from then on waits in `pending`, in order, and
    is sent once when the run ends; the job itself goes on."""

    def __init__(self, experiment: str, job: str, tags: dict, params: dict, data_cards: list[Path],
                 run_id: str | None = None):
        """`data_cards`: the data cards of the inputs; their file hashes become `data.<file>` tags.
        MASKBENCH_TRACKING=off tracks nothing, with a warning (a machine without MLflow: the GPU
        suite's lent one); the job's metrics.json is written all the same."""
        self.pending: list[tuple] = []  # (what, arguments) logged while the store did not answer
        self.lost: Exception | None = None  # why the store stopped answering
        if os.environ.get("MASKBENCH_TRACKING") == "off":
            logging.getLogger(__name__).warning("MASKBENCH_TRACKING=off: %s is not tracked in MLflow", job)
            self.mlflow, self.run_id = Untracked(), None
            return
        import mlflow

        self.mlflow = mlflow
        ensure_store(experiment)
        name = run_name(job)
        if os.environ.get("DVC_EXP_NAME"):
            tags = {**tags, "dvc_experiment": os.environ["DVC_EXP_NAME"]}
        self.name = name
        with _store_readable(mlflow.get_tracking_uri()):
            self._end_abandoned(experiment, name, keep=run_id)
            self._supersede(experiment, name, keep=run_id)
            self.run = mlflow.start_run(run_id=run_id, run_name=None if run_id else name,
                                        tags=None if run_id else tags)
        self.run_id = self.run.info.run_id
        try:  # a job that fails while its run opens is a failed run too, not one MLflow ends FINISHED at exit
            if "error" in self.run.data.tags:  # an earlier attempt's, which this one may not repeat
                mlflow.delete_tag("error")
            if run_id is None:
                mlflow.log_params(flatten(params))
                for card_path in data_cards:
                    with reading(card_path):  # a damaged card: named, with the job that rebuilds it
                        files = json.loads(Path(card_path).read_text())["source"]["files"]
                    mlflow.set_tags({f"data.{name}": digest for name, digest in files.items()})
                    mlflow.log_artifact(str(card_path), artifact_path="data_cards")
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def _end_abandoned(self, experiment: str, name: str, keep: str | None) -> None:
        """End KILLED this job's earlier runs that are still RUNNING: their process was killed
        hard (SIGKILL, a lost node) and could not say so itself."""
        for run in self.mlflow.search_runs(experiment_names=[experiment], output_format="list",
                                           filter_string=f"attributes.run_name = '{name}' "
                                                         "and attributes.status = 'RUNNING'"):
            if run.info.run_id != keep:
                self.mlflow.MlflowClient().set_terminated(run.info.run_id, status="KILLED")
                logging.getLogger(__name__).warning("MLflow run %s of %s was left RUNNING by a killed job: "
                                                    "marked KILLED", run.info.run_id, name)

    def _supersede(self, experiment: str, name: str, keep: str | None) -> None:
        """Rename this job's earlier runs `<name> (superseded <when>)`: a job re-run (by
        Snakemake or DVC) leaves one run under its name, the one its outputs come from, and
        the earlier ones beside it for history."""
        for run in self.mlflow.search_runs(experiment_names=[experiment], output_format="list",
                                           filter_string=f"attributes.run_name = '{name}'"):
            if run.info.run_id != keep:
                when = time.strftime("%Y-%m-%d %H:%M", time.gmtime((run.info.end_time or run.info.start_time) / 1000))
                self.mlflow.MlflowClient().update_run(run.info.run_id, name=f"{name} (superseded {when} UTC)")

    def _send(self, what, *args) -> None:
        """Call the store (`mlflow.<what>(*args)`, or `what(*args)`), or queue the call once the
        store has stopped answering; the first failure is logged with the bound it cost, not raised."""
        if self.lost is None:
            started = time.monotonic()
            try:
                (what if callable(what) else getattr(self.mlflow, what))(*args)
                return
            except Exception as exc:  # MLflow's own, requests', sqlite's: the store, not the job
                self.lost = exc
                logging.getLogger(__name__).warning(
                    "MLflow store %s stopped answering (%s, after %.0f s): training goes on; what this job logs "
                    "waits and is sent when the run ends (every metric is also in the job's own log files)",
                    self.mlflow.get_tracking_uri(), str(exc)[:200], time.monotonic() - started)
        self.pending.append((what, args))

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        # the time of measuring, not of sending: a queued metric keeps its place on the time axis
        self._send("log_metrics", {k: float(v) for k, v in metrics.items()}, step, None, None,
                   int(time.time() * 1000))

    def log_params(self, params: dict) -> None:
        """Values fixed for the run (a parameter count, the steps taken): params, not metrics."""
        self._send("log_params", flatten(params))

    def log_artifact(self, path: Path) -> None:
        self._send("log_artifact", str(path))

    def set_tag(self, key: str, value: str) -> None:
        self._send("set_tag", key, value)

    def record_model(self, model_type: str, step: int, tags: dict[str, str]) -> None:
        """Record the model the run trained as the run's output: an MLflow LoggedModel named after
        the run, its files left where the workflow wrote them (`tags` say where, or that they were
        not kept). MLflow's UI lists a run with an output model as a training run, and one without
        as an evaluation (its "Evaluations" view: `run.outputs.model_outputs` decides)."""
        if self.run_id is not None:
            self._send(_record_model, re.sub(r"[/:.%\"']", "-", self.name), model_type, step, tags)

    def finish(self, status: str = "FINISHED") -> None:
        """Send what waited, in order, then end the run. A store still down costs one more bounded
        wait and leaves the run RUNNING (the job's next attempt marks it KILLED); the job, whose
        files are written, does not fail for it."""
        if self.pending:
            waiting, self.pending, self.lost = self.pending, [], None
            for number, (what, args) in enumerate(waiting):
                self._send(what, *args)
                if self.lost is not None:
                    self.pending = waiting[number:]
                    break
        if self.lost is None:
            self.mlflow.end_run(status=status)
            return
        logging.getLogger(__name__).warning(
            "MLflow run %s: %d logging calls could not be sent to %s and are not in MLflow (the job's own files "
            "hold its metrics); the run reads RUNNING until the job's next attempt marks it KILLED",
            self.run_id, len(self.pending), self.mlflow.get_tracking_uri())
        with contextlib.suppress(Exception):  # forgets the run in this process (MLflow pops it first), then fails
            self.mlflow.end_run(status=status)

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            self.finish()
            return
        if issubclass(kind, Exception):  # a store that cannot take the tag (disk full) still ends the run
            self._send("set_tag", "error", f"{kind.__name__}: {error}"[:5000])
        try:
            self.finish("FAILED" if issubclass(kind, Exception) else "KILLED")
        except Exception as failure:  # the job's own error is the one to raise; the next attempt ends this run KILLED
            logging.getLogger(__name__).warning("MLflow run %s could not be ended (%s): it reads RUNNING until this "
                                                "job's next attempt marks it KILLED", self.run_id, failure)
