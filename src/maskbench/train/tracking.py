"""MLflow tracking: one run per pretraining and per fine-tuning job.

The default store is a SQLite file at the repository root, addressed by absolute path so
every job (whatever its working directory) writes to the same DB. A fresh SQLite store is
created and migrated once under a file lock: concurrent first-time jobs otherwise race on
the schema migration and fail. `MLFLOW_TRACKING_URI` overrides the store.

MLflow stores artifact locations as absolute paths, fixed when the experiment and each run
are created. The default store keeps its artifacts in the workspace (`mlartifacts/`), so a
copied or moved workspace would write into the original's: each job therefore moves the
store's locations to the workspace it runs in, if they point into another (`relocate_artifacts`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sqlite3
from pathlib import Path

DEFAULT_DB = "mlflow.db"


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
    if not chosen_by_user:
        # MLflow exports the URI to os.environ for subprocesses; left there, it would read as
        # the user's choice to the next call (another root in this process) and to every job
        # this process starts, which must each find the store at their own root.
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    logging.getLogger("alembic").setLevel(logging.WARNING)
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
                                     tags={"mlflow.experimentKind": "custom_model_development"})
        elif location is not None and found.artifact_location != location:
            relocate_artifacts(root / DEFAULT_DB, found.artifact_location, location)
    mlflow.set_experiment(experiment)
    return uri


def artifact_location(root: Path, experiment: str) -> str:
    """Where the default store at `root` keeps an experiment's artifacts."""
    return (root / "mlartifacts" / experiment).as_uri()


def relocate_artifacts(db: Path, old: str, new: str) -> None:
    """Move the artifact locations of the store `db` from `old` (the experiment's, in the
    workspace the store was made in, before it was copied or moved) to `new` (this
    workspace's): the experiment's and its runs'. MLflow has no call that changes an artifact
    location, so its two columns are rewritten; the artifacts logged so far came with the copy."""
    with contextlib.closing(sqlite3.connect(db)) as connection, connection:
        connection.execute("UPDATE experiments SET artifact_location = ? WHERE artifact_location = ?", (new, old))
        connection.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) "
                           "WHERE substr(artifact_uri, 1, ?) = ?", (new, len(old) + 1, len(old) + 1, old + "/"))
    logging.getLogger(__name__).warning("MLflow store %s was made in another workspace: its artifacts now go under "
                                        "%s, not %s", db, new, old)


def flatten(params: dict, prefix: str = "") -> dict[str, str]:
    """Nested params as dotted keys, values as strings (MLflow params are flat strings)."""
    flat = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = str(value)[:500]
    return flat


class Tracker:
    """A thin MLflow run: start (or resume) it, log step metrics, finish with a status.

    Used as a context manager, the run's status always says how the job ended: FINISHED when
    the block completes, FAILED (with the error as the `error` tag) when it raises, KILLED when
    it is interrupted (Ctrl-C, or SystemExit)."""

    def __init__(self, experiment: str, run_name: str, tags: dict, params: dict, data_cards: list[Path],
                 run_id: str | None = None):
        """`data_cards`: the data cards of the inputs; their file hashes become `data.<file>` tags."""
        import mlflow

        self.mlflow = mlflow
        ensure_store(experiment)
        self._end_abandoned(experiment, run_name, keep=run_id)
        self.run = mlflow.start_run(run_id=run_id, run_name=None if run_id else run_name,
                                    tags=None if run_id else tags)
        if "error" in self.run.data.tags:  # an earlier attempt's, which this one may not repeat
            mlflow.delete_tag("error")
        if run_id is None:
            mlflow.log_params(flatten(params))
            for card_path in data_cards:
                card = json.loads(Path(card_path).read_text())
                mlflow.set_tags({f"data.{name}": digest for name, digest in card["source"]["files"].items()})
                mlflow.log_artifact(str(card_path), artifact_path="data_cards")
        self.run_id = self.run.info.run_id

    def _end_abandoned(self, experiment: str, run_name: str, keep: str | None) -> None:
        """End KILLED this job's earlier runs that are still RUNNING: their process was killed
        hard (SIGKILL, a lost node) and could not say so itself."""
        for run in self.mlflow.search_runs(experiment_names=[experiment], output_format="list",
                                           filter_string=f"attributes.run_name = '{run_name}' "
                                                         "and attributes.status = 'RUNNING'"):
            if run.info.run_id != keep:
                self.mlflow.MlflowClient().set_terminated(run.info.run_id, status="KILLED")
                logging.getLogger(__name__).warning("MLflow run %s of %s was left RUNNING by a killed job: "
                                                    "marked KILLED", run.info.run_id, run_name)

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        self.mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)

    def log_artifact(self, path: Path) -> None:
        self.mlflow.log_artifact(str(path))

    def set_tag(self, key: str, value: str) -> None:
        self.mlflow.set_tag(key, value)

    def finish(self, status: str = "FINISHED") -> None:
        self.mlflow.end_run(status=status)

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            self.finish()
        elif issubclass(kind, Exception):
            self.mlflow.set_tag("error", f"{kind.__name__}: {error}"[:5000])
            self.finish("FAILED")
        else:
            self.finish("KILLED")
