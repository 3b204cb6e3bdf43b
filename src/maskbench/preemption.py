"""SIGTERM, the signal a scheduler (SLURM, Kubernetes) sends before it takes a node back.

The CLI installs the handler for every stage job. By default SIGTERM raises `Preempted` where
the job is, so its MLflow run ends KILLED and the process exits non-zero. Pretraining defers it
to the end of the current step (`deferred_to_step_end`), writes a checkpoint and then stops,
so that the re-run resumes from where it was preempted.
"""

from __future__ import annotations

import contextlib
import signal

EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM


class Preempted(BaseException):
    """The job was asked to stop (SIGTERM). A BaseException, like KeyboardInterrupt: it is not a
    failure of the job, and no `except Exception` may swallow it."""


_requested = False
_deferred = False


def install() -> None:
    signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum, frame) -> None:
    global _requested
    _requested = True
    if not _deferred:
        raise Preempted("stopped by SIGTERM")


def requested() -> bool:
    """Whether SIGTERM arrived while it was deferred."""
    return _requested


@contextlib.contextmanager
def deferred_to_step_end():
    """Within the block SIGTERM only sets `requested()`, which the loop checks between steps."""
    global _deferred
    _deferred = True
    try:
        yield
    finally:
        _deferred = False
