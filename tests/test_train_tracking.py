"""The MLflow store (the default SQLite DB at the root with artifacts beside it, or the user's)
and what the runs record: metrics named per quantity, the job in tags, constants as params."""

from __future__ import annotations

import json
import shutil

import mlflow
import pytest

from maskbench.finetune.loop import final_scores, finetune
from maskbench.train.tracking import SCORES_VIEW, ensure_store, flatten, pretraining_tags, run_name
from tests.helpers import finetune_outputs, run_pretrain, smoke_config


def tables_made(db, empty_tracking_store):
    """`db` with MLflow's tables and nothing in them, copied from the session's empty store:
    making the tables takes seconds per store, and that MLflow makes them where the URI points
    is proved end to end (test_e2e reads the smoke build's own `mlflow.db`)."""
    shutil.copyfile(empty_tracking_store, db)
    return db


def test_default_store_is_an_absolute_sqlite_db_with_artifacts_beside_it(tmp_path, monkeypatch,
                                                                          empty_tracking_store):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tables_made(tmp_path / "mlflow.db", empty_tracking_store)
    uri = ensure_store("probe", tmp_path)
    assert uri == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    location = mlflow.MlflowClient(uri).get_experiment_by_name("probe").artifact_location
    assert location == (tmp_path.resolve() / "mlartifacts" / "probe").as_uri()
    assert ensure_store("probe", tmp_path) == uri  # a second job finds it


def test_a_store_the_user_chose_keeps_its_own_artifact_location(tmp_path, monkeypatch, empty_tracking_store):
    uri = f"sqlite:///{tables_made(tmp_path / 'elsewhere.db', empty_tracking_store)}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "repo").mkdir()
    assert ensure_store("probe", tmp_path / "repo") == uri
    location = mlflow.MlflowClient(uri).get_experiment_by_name("probe").artifact_location
    assert "mlartifacts" not in location and not (tmp_path / "repo" / "mlflow.db").exists()


def test_the_default_store_is_not_exported_as_the_users_choice(tmp_path, monkeypatch, empty_tracking_store):
    """mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI; a second root in the same process
    (and every job it starts) must still get its own default store, not the first one's."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    tables_made(first / "mlflow.db", empty_tracking_store), tables_made(second / "mlflow.db", empty_tracking_store)
    ensure_store("probe", first)
    assert ensure_store("probe", second) == f"sqlite:///{second.resolve() / 'mlflow.db'}"
    client = mlflow.MlflowClient(f"sqlite:///{second / 'mlflow.db'}")
    location = client.get_experiment_by_name("probe").artifact_location
    assert location == (second.resolve() / "mlartifacts" / "probe").as_uri()


# --- what the runs record: metric names per quantity, the job in tags ---------------------------


def test_run_names_carry_the_dvc_experiment_they_ran_in(monkeypatch):
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    assert run_name("finetune/mlm/boolq/seed1") == "finetune/mlm/boolq/seed1"
    monkeypatch.setenv("DVC_EXP_NAME", "lean-wd")  # what `dvc exp run -n lean-wd` sets for its stages
    assert run_name("finetune/mlm/boolq/seed1") == "finetune/mlm/boolq/seed1@lean-wd"


def test_pretraining_tags_name_the_declared_run_and_its_seed():
    config = {"runs": {"mlm": {"objective": "mlm"},
                       "mlm-pseed2": {"objective": "mlm", "seed_of": "mlm", "pretraining_seed": 2}}}
    assert pretraining_tags(config, "mlm") == {"run": "mlm", "pretraining_seed": "0"}
    assert pretraining_tags(config, "mlm-pseed2") == {"run": "mlm", "pretraining_seed": "2"}
    assert pretraining_tags(config, "scratch") == {"run": "scratch", "pretraining_seed": "0"}


def test_final_scores_are_named_by_split_and_metric_and_the_reported_one_is_the_score():
    tested = {"metric": "accuracy", "dev": 0.75, "test": 0.5, "extra": {"dev_mismatched": 0.25},
              "reported_split": "test"}
    assert final_scores(tested) == {"dev_accuracy": 0.75, "test_accuracy": 0.5,
                                    "dev_mismatched_accuracy": 0.25, "score": 0.5, "score_percent": 50.0}
    unlabelled_test = {"metric": "matthews_corr", "dev": 0.25, "test": None, "extra": {}, "reported_split": "dev"}
    assert final_scores(unlabelled_test) == {"dev_matthews_corr": 0.25, "score": 0.25, "score_percent": 25.0}
    rmse = {"metric": "rmse", "dev": 1.25, "test": 1.5, "extra": {}, "reported_split": "test"}
    assert final_scores(rmse) == {"dev_rmse": 1.25, "test_rmse": 1.5, "score": 1.5}  # the tables print RMSE as is


def test_pretraining_and_fine_tuning_runs_overlay_by_quantity(tmp_path, monkeypatch, corpus, probe_task,
                                                                empty_tracking_store):
    """A tiny pretraining of seed 1 of `mlm` and its fine-tuning with seed 2, in a `dvc exp run`:
    metric names say only what was measured, the job is in the tags, constants are params, and
    the experiment has the runs table's "Scores" view."""
    uri = f"sqlite:///{tables_made(tmp_path / 'mlflow.db', empty_tracking_store)}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    config = smoke_config(seeds=[0, 1])
    metrics = run_pretrain(config, "mlm-pseed1", corpus, tmp_path / "pretrain")
    monkeypatch.setenv("DVC_EXP_NAME", "lean-wd")
    config["finetune"]["settings"]["batch_size"] = 1  # 8 steps: fewer than LOG_EVERY, still a curve
    scores = finetune(config, "mlm-pseed1", "probe", 2, tmp_path / "pretrain/model", probe_task / "task",
                      probe_task / "card.json", probe_task / "download.json", *finetune_outputs(tmp_path / "finetune"))

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("maskbench")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert runs.keys() == {"pretrain/mlm-pseed1", "finetune/mlm-pseed1/probe/seed2@lean-wd"}
    pretraining, finetuning = runs["pretrain/mlm-pseed1"], runs["finetune/mlm-pseed1/probe/seed2@lean-wd"]

    assert {k: pretraining.data.tags[k] for k in ("stage", "run", "pretraining_seed")} == \
        {"stage": "pretrain", "run": "mlm", "pretraining_seed": "1"}
    assert pretraining.data.metrics.keys() == {"train_loss", "lr", "grad_norm", "tokens_per_s", "valid_loss",
                                               "unigram_gap", "valid_loss_floor", "valid_perplexity",
                                               "median_tokens_per_s"}
    assert [m.step for m in client.get_metric_history(pretraining.info.run_id, "train_loss")] == [1, 2, 3]
    assert pretraining.data.params["steps"] == "3"
    assert pretraining.data.params["parameters"] == str(metrics["parameters"])
    assert float(pretraining.data.params["unigram_loss"]) == metrics["unigram_loss"]

    assert {k: finetuning.data.tags[k]
            for k in ("stage", "run", "pretraining_seed", "task", "seed", "dvc_experiment")} \
        == {"stage": "finetune", "run": "mlm", "pretraining_seed": "1", "task": "probe", "seed": "2",
            "dvc_experiment": "lean-wd"}
    assert {"epoch_dev_accuracy", "dev_accuracy", "test_accuracy", "score"} <= finetuning.data.metrics.keys()
    assert finetuning.data.metrics.keys() <= {"train_loss", "lr", "examples_per_s", "epoch_dev_accuracy",
                                              "dev_accuracy", "test_accuracy", "score", "score_percent"}
    # a loss and lr curve however short the run (>= 5 points), and a point at each epoch's last step;
    # the lr each step trained with: the schedule's, not the next step's (0 after the last)
    epochs = client.get_metric_history(finetuning.info.run_id, "epoch_dev_accuracy")
    losses = {m.step for m in client.get_metric_history(finetuning.info.run_id, "train_loss")}
    rates = [m.value for m in sorted(client.get_metric_history(finetuning.info.run_id, "lr"), key=lambda m: m.step)]
    assert len(losses) >= 5 and len(rates) == len(losses) and epochs and {m.step for m in epochs} <= losses
    assert rates[-1] > 0 and len(set(rates)) > 1
    assert finetuning.data.metrics["score"] == finetuning.data.metrics["test_accuracy"] == scores["test"]
    assert finetuning.data.params["reported_split"] == "test"

    # training runs, not evaluations: MLflow's UI calls a run without an output model an evaluation
    # (the fine-tuned model is the best epoch's, at that epoch's last step)
    for found, kind, steps, weights in [(pretraining, "pretrained", {3}, str(tmp_path / "pretrain/model")),
                                        (finetuning, "fine-tuned", {m.step for m in epochs}, "not kept")]:
        [output] = found.outputs.model_outputs
        model = client.get_logged_model(output.model_id)
        assert (model.model_type, model.source_run_id) == (kind, found.info.run_id) and output.step in steps
        assert model.tags["weights"].startswith(weights)
    assert client.get_logged_model(finetuning.outputs.model_outputs[0].model_id).tags["pretrained_model"] == \
        str(tmp_path / "pretrain/model")

    view = json.loads(experiment.tags[f"mlflow.sharedViewState.{SCORES_VIEW}"])
    assert view["name"] == "Scores"
    columns = json.loads(view["state"])["selectedColumns"]
    assert {"metrics.`score_percent`", "metrics.`valid_loss`", "tags.`run`", "tags.`seed`"} <= set(columns)
    assert finetuning.data.metrics["score_percent"] == pytest.approx(100 * scores["test"])  # as the tables say it


def test_params_keyed_by_data_stay_one_param_mlflow_accepts():
    """A task card's commonest [UNK] strings are keys MLflow refuses as param names ("`",
    "[C@H]"): they stay one JSON param, and every name flatten makes is one MLflow takes."""
    from mlflow.utils.validation import _validate_param_name

    flat = flatten({"data": {"unknown_tokens": {"dev": {"rate": 0.001, "top": {"`": 3, "[C@H]": 1}}}}})
    assert flat["data.unknown_tokens.dev.rate"] == "0.001"
    assert json.loads(flat["data.unknown_tokens.dev.top"]) == {"`": 3, "[C@H]": 1}
    for name in flat:
        _validate_param_name(name)


def test_a_job_run_again_leaves_one_run_under_its_name(tmp_path, monkeypatch, empty_tracking_store):
    """A DVC (or Snakemake) re-run of a job: the earlier run is renamed superseded, not left
    beside the new one under the same name."""
    from maskbench.train.tracking import Tracker

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tables_made(tmp_path / 'm.db', empty_tracking_store)}")
    monkeypatch.chdir(tmp_path)
    ids = []
    for _ in range(2):
        with Tracker("probe", "finetune/mlm/boolq/seed1", tags={}, params={"a": 1}, data_cards=[]) as tracker:
            ids.append(tracker.run_id)
    runs = mlflow.search_runs(experiment_names=["probe"], output_format="list")
    names = {run.info.run_id: run.info.run_name for run in runs}
    assert names[ids[1]] == "finetune/mlm/boolq/seed1"
    assert names[ids[0]].startswith("finetune/mlm/boolq/seed1 (superseded ")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")


def test_dev_curve_points_draw_the_dev_score_as_a_curve_and_leave_the_results_unchanged(
        tmp_path, monkeypatch, corpus, probe_task, empty_tracking_store):
    """`tracking.dev_curve_points: 5` on a run of one epoch (whose `epoch_dev_<metric>` is one
    point): `running_dev_accuracy` has a point at 5 evenly spaced steps, the last the epoch's
    end; metrics.json and the predictions are those of the run without it, bit for bit."""
    uri = f"sqlite:///{tables_made(tmp_path / 'mlflow.db', empty_tracking_store)}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    config = smoke_config()
    run_pretrain(config, "mlm", corpus, tmp_path / "pretrain")
    config["finetune"]["settings"].update(batch_size=1, epochs=1)  # 8 steps
    outputs = {}
    for points in (0, 5):
        config["tracking"]["dev_curve_points"] = points
        out = tmp_path / f"points{points}"
        finetune(config, "mlm", "probe", 1, tmp_path / "pretrain/model", probe_task / "task",
                 probe_task / "card.json", probe_task / "download.json", *finetune_outputs(out))
        metrics, predictions = finetune_outputs(out)
        outputs[points] = ({k: v for k, v in json.loads(metrics.read_text()).items()
                            if k not in ("seconds", "mlflow_run_id", "peak_gpu_memory_gib")}, predictions.read_bytes())
    assert outputs[5] == outputs[0]

    client = mlflow.MlflowClient(uri)
    runs = [r for r in client.search_runs([client.get_experiment_by_name("maskbench").experiment_id])
            if r.data.tags["stage"] == "finetune"]
    without, with_curve = sorted(runs, key=lambda r: "running_dev_accuracy" in r.data.metrics)
    assert "running_dev_accuracy" not in without.data.metrics
    curve = sorted(m.step for m in client.get_metric_history(with_curve.info.run_id, "running_dev_accuracy"))
    assert curve == [2, 4, 5, 7, 8]  # ceil(8 i / 5), i = 1..5
    [epoch_end] = client.get_metric_history(with_curve.info.run_id, "epoch_dev_accuracy")
    assert epoch_end.step == 8
