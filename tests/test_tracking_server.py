"""A tracking server costs a job a bounded wait (`maskbench.train.tracking`): one that is down
when the job starts fails it within ~30 s naming the URI and the offline way; one that dies
mid-run costs one bounded wait, after which the job goes on, and what it logged meanwhile
reaches the run once the server is back when the run ends."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from maskbench.train.tracking import HTTP_POLICY, Tracker, TrackingUnavailable


@pytest.fixture
def http_policy(monkeypatch):
    """The job's HTTP policy, set for this test only (the tracker sets it with setdefault)."""
    for name in HTTP_POLICY:
        monkeypatch.delenv(name, raising=False)
    yield
    for name in HTTP_POLICY:
        os.environ.pop(name, None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_down_at_the_start_fails_the_job_within_30_s_naming_uri_and_offline_way(tmp_path, monkeypatch,
                                                                                          http_policy,
                                                                                          empty_tracking_store):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    started = time.monotonic()
    with pytest.raises(TrackingUnavailable, match=rf"^MLflow tracking server {uri} \(MLFLOW_TRACKING_URI\) does not "
                                                  r"answer: .*work offline: unset MLFLOW_TRACKING_URI"):
        Tracker("maskbench", "pretrain/mlm", tags={}, params={}, data_cards=[])
    assert time.monotonic() - started < 30  # MLflow's own policy: 250-274 s
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # the way out it names: the default store at the root
    monkeypatch.chdir(tmp_path)
    shutil.copyfile(empty_tracking_store, tmp_path / "mlflow.db")  # its tables made: that takes seconds
    with Tracker("maskbench", "pretrain/mlm", tags={}, params={}, data_cards=[]) as tracker:
        tracker.log_metrics({"train_loss": 1.0}, step=1)
    from mlflow import MlflowClient

    store = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")  # the run is in it
    [run] = store.search_runs([store.get_experiment_by_name("maskbench").experiment_id])
    assert run.info.run_id == tracker.run_id and run.data.metrics == {"train_loss": 1.0}


def serve(tmp_path, port: int) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                               f"sqlite:///{tmp_path / 'server.db'}", "--artifacts-destination", str(tmp_path / "art"),
                               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    pytest.fail("mlflow server did not start in 120 s")


def stop(server: subprocess.Popen) -> None:
    os.killpg(server.pid, 9)
    server.wait()


@pytest.mark.slow
def test_a_server_that_dies_mid_run_costs_one_bounded_wait_and_loses_no_metric(tmp_path, monkeypatch, http_policy):
    import mlflow

    port = free_port()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    server = serve(tmp_path, port)
    try:
        tracker = Tracker("maskbench", "pretrain/mlm", tags={}, params={"a": 1}, data_cards=[])
        tracker.log_metrics({"train_loss": 3.0}, step=1)
        stop(server)
        started = time.monotonic()
        tracker.log_metrics({"train_loss": 2.0}, step=2)  # the one bounded wait
        waited = time.monotonic() - started
        started = time.monotonic()
        for step in range(3, 13):
            tracker.log_metrics({"train_loss": 1.0 / step}, step=step)
        tracker.set_tag("done", "yes")
        assert waited < 30 and time.monotonic() - started < 1  # MLflow's own policy: 12.5 minutes, then the job failed
        assert len(tracker.pending) == 12
        server = serve(tmp_path, port)
        tracker.finish()
        run = mlflow.MlflowClient().get_run(tracker.run_id)
        history = mlflow.MlflowClient().get_metric_history(tracker.run_id, "train_loss")
        assert run.info.status == "FINISHED" and run.data.tags["done"] == "yes"
        assert [m.step for m in history] == list(range(1, 13))
    finally:
        stop(server)
