"""The MLflow store: the default SQLite DB at the root with artifacts beside it, or the user's."""

from __future__ import annotations

import mlflow

from maskbench.train.tracking import ensure_store


def test_default_store_is_an_absolute_sqlite_db_with_artifacts_beside_it(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = ensure_store("probe", tmp_path)
    assert uri == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}" and (tmp_path / "mlflow.db").exists()
    location = mlflow.MlflowClient(uri).get_experiment_by_name("probe").artifact_location
    assert location == (tmp_path.resolve() / "mlartifacts" / "probe").as_uri()
    assert ensure_store("probe", tmp_path) == uri  # a second job finds it


def test_a_store_the_user_chose_keeps_its_own_artifact_location(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "repo").mkdir()
    assert ensure_store("probe", tmp_path / "repo") == uri
    location = mlflow.MlflowClient(uri).get_experiment_by_name("probe").artifact_location
    assert "mlartifacts" not in location and not (tmp_path / "repo" / "mlflow.db").exists()


def test_the_default_store_is_not_exported_as_the_users_choice(tmp_path, monkeypatch):
    """mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI; a second root in the same process
    (and every job it starts) must still get its own default store, not the first one's."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    ensure_store("probe", first)
    assert ensure_store("probe", second) == f"sqlite:///{second.resolve() / 'mlflow.db'}"
    location = mlflow.MlflowClient(f"sqlite:///{second / 'mlflow.db'}").get_experiment_by_name("probe").artifact_location
    assert location == (second.resolve() / "mlartifacts" / "probe").as_uri()
