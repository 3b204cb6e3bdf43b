"""The controls: the `none` run (an untrained encoder, 0 steps, fine-tuned like any run), the
baselines of a task (values worked out by hand; ECFP chooses C on dev) and the layer-by-layer
probe of a frozen encoder (every layer reported, the best chosen on dev)."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch

from maskbench.config import run_settings
from maskbench.controls.baselines import baselines
from maskbench.controls.linear import fit_on_dev
from maskbench.controls.probe import layer_features, probe
from maskbench.finetune.inputs import collate
from maskbench.finetune.loop import finetune
from maskbench.model.encoder import Encoder, EncoderConfig
from tests.helpers import GRID, finetune_outputs, run_pretrain, smoke_config, task_files, tiny_encoder, with_task

pytestmark = pytest.mark.usefixtures("tracking_store")

def read_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- the none run ---------------------------------------------------------------------------


@pytest.mark.parametrize("run", ["none", "smiles_none"])
def test_none_run_saves_the_seeded_initial_encoder_after_0_steps(run, corpus, probe_task, tmp_path):
    config = smoke_config()
    out = tmp_path / "pretrain"
    metrics = run_pretrain(config, run, corpus, out)
    assert metrics["steps"] == 0 and metrics["train_loss"] is None
    assert math.isfinite(metrics["valid_loss"])  # MLM's loss of an untrained encoder: about ln |V|
    for name in ("log.csv", "valid.csv"):
        with open(out / name) as fh:
            header, *rows = list(csv.reader(fh))
        assert header[0] == "step" and rows == []

    saved = Encoder.from_pretrained(out / "model")
    assert saved.config.pretraining["objective"] == "none"
    torch.manual_seed(run_settings(config, run)["seed"])
    fresh = Encoder(EncoderConfig(**{k: v for k, v in saved.config.to_dict().items() if k != "pretraining"}))
    for name, tensor in fresh.state_dict().items():  # but the LM head's bias, at the corpus's unigram distribution
        assert name == "lm_bias" or torch.equal(tensor, saved.state_dict()[name]), name

    result = finetune(config, run, "probe", 1, out / "model", probe_task / "task", probe_task / "card.json",
                      probe_task / "download.json", *finetune_outputs(tmp_path / "finetune"))
    assert 0.0 <= result["test"] <= 1.0


# --- baselines ------------------------------------------------------------------------------


def rows(labels: list) -> list[dict]:
    return [{"text": f"t{i}", "text_pair": None, "label": y} for i, y in enumerate(labels)]


def test_majority_class_is_the_train_majority_with_probability_one(config, tmp_path):
    task_files(tmp_path, {"train": rows([1, 1, 0]), "dev": rows([1, 0]), "test": rows([0, 1, 1, 1])},
               "classification", ["no", "yes"])
    config = with_task(config, "cls", "text", "classification", "accuracy")
    metrics = baselines(config, "cls", tmp_path / "task", tmp_path / "card.json", *finetune_outputs(tmp_path / "out"))
    majority = metrics["baselines"]["majority"]
    assert (metrics["split"], metrics["metric"]) == ("test", "accuracy") and list(metrics["baselines"]) == ["majority"]
    assert majority["value"] == 0.75 and majority["dev"] == 0.5 and majority["chosen"] == {}
    assert majority["scores"]["f1"] == pytest.approx(6 / 7) and majority["scores"]["matthews_corr"] == 0.0
    lines = read_lines(tmp_path / "out/predictions.jsonl")
    assert lines[0] == {"baseline": "majority", "split": "dev", "index": 0, "prediction": [0.0, 1.0], "label": 1}
    assert [(r["split"], r["index"]) for r in lines] == [("dev", 0), ("dev", 1), *(("test", i) for i in range(4))]


def test_train_mean_and_unlabelled_test_reports_dev(config, tmp_path):
    task_files(tmp_path, {"train": rows([1.0, 2.0, 3.0, 6.0]), "dev": rows([2.0, 4.0]), "test": rows([None, None])},
               "regression")
    config = with_task(config, "reg", "text", "regression", "rmse")
    metrics = baselines(config, "reg", tmp_path / "task", tmp_path / "card.json", *finetune_outputs(tmp_path / "out"))
    mean = metrics["baselines"]["train_mean"]
    assert metrics["split"] == "dev" and mean["value"] == mean["dev"] == 1.0  # predicts 3 for 2 and 4
    written = json.loads((tmp_path / "out/metrics.json").read_text())["baselines"]["train_mean"]
    assert written["scores"]["spearman"] is None  # a constant has no rank correlation
    assert {r["prediction"] for r in read_lines(tmp_path / "out/predictions.jsonl")} == {3.0}


def test_always_unanswerable_scores_the_unanswerable_share(config, tmp_path):
    context = "the cat sat on the mat"
    qa = [{"id": str(i), "title": "", "question": "q", "context": context,
           "answers": {"text": [a] if a else [], "answer_start": [context.index(a)] if a else []}}
          for i, a in enumerate(["the mat", None, None, "cat"])]
    task_files(tmp_path, {"train": qa, "dev": qa[:2], "test": qa}, "qa")
    config = with_task(config, "qa", "text", "qa", "squad_v2_f1")
    metrics = baselines(config, "qa", tmp_path / "task", tmp_path / "card.json", *finetune_outputs(tmp_path / "out"))
    unanswerable = metrics["baselines"]["always_unanswerable"]
    assert unanswerable["value"] == 0.5 and unanswerable["dev"] == 0.5
    assert unanswerable["scores"] == {"squad_v2_f1": 0.5, "squad_v2_exact": 0.5}
    line = read_lines(tmp_path / "out/predictions.jsonl")[0]
    assert line == {"baseline": "always_unanswerable", "split": "dev", "id": "0", "prediction": "", "gold": ["the mat"]}


AROMATIC = ["c1ccccc1", "c1ccccc1O", "c1ccncc1", "Cc1ccccc1", "c1ccc2ccccc2c1", "Oc1ccncc1", "c1ccoc1", "Nc1ccccc1"]
ALIPHATIC = ["CCO", "CCCO", "CCN", "CCCCN", "CC(=O)O", "CCCCCC", "C1CCCCC1", "CCOCC"]


def molecules(split: slice) -> list[dict]:
    """Task 0: aromatic or not (ECFP separates it); task 1: unlabelled for half the molecules."""
    rows = [{"smiles": s, "labels": [float(a), None if i % 2 else float(i % 4 == 0)]}
            for i, (s, a) in enumerate(zip(AROMATIC + ALIPHATIC, [1] * 8 + [0] * 8))]
    order = [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15]
    return [rows[i] for i in order][split]


def test_train_prior_and_ecfp_on_molecules(config, tmp_path):
    task_files(tmp_path, {"train": molecules(slice(0, 8)), "dev": molecules(slice(8, 12)),
                          "test": molecules(slice(12, 16))}, "multitask_classification")
    (tmp_path / "card.json").write_text(json.dumps({"kind": "multitask_classification", "task_names": ["aro", "t1"]}))
    config = with_task(config, "mol", "smiles", "multitask_classification", "roc_auc")
    metrics = baselines(config, "mol", tmp_path / "task", tmp_path / "card.json", *finetune_outputs(tmp_path / "out"))
    prior, ecfp = metrics["baselines"]["train_prior"], metrics["baselines"]["ecfp"]
    assert prior["value"] == 0.5 and prior["label"] == "train positive rate"
    assert ecfp["chosen"]["C"] in GRID["C"] and ecfp["value"] == 1.0  # aromaticity is in the fingerprint bits
    lines = [r for r in read_lines(tmp_path / "out/predictions.jsonl") if r["baseline"] == "train_prior"]
    assert lines[0]["prediction"] == [0.5, 0.5]  # train: 4 of 8 aromatic; task 1: 2 of its 4 labelled

    # the C reported is the one with the best dev score
    data = {s: molecules(sl) for s, sl in (("train", slice(0, 8)), ("dev", slice(8, 12)))}
    x = {s: np.array([[float(r["smiles"].islower()), float(i % 3)] for i, r in enumerate(rows)])
         for s, rows in data.items()}
    y = {s: np.array([r["labels"][0] for r in rows]) for s, rows in data.items()}
    fit = fit_on_dev("classification", "accuracy", x, y, GRID, n_classes=2)
    singles = {c: fit_on_dev("classification", "accuracy", x, y, {**GRID, "C": [c]}, n_classes=2).dev
               for c in GRID["C"]}
    assert fit.dev == max(singles.values()) and singles[fit.chosen["C"]] == fit.dev


def test_ridge_alpha_is_chosen_on_dev():
    rng = np.random.default_rng(0)
    x = {s: rng.normal(size=(40, 3)) for s in ("train", "dev")}
    y = {s: x[s] @ np.array([1.0, -2.0, 0.5]) for s in x}
    fit = fit_on_dev("regression", "rmse", x, y, {"C": [1.0], "alpha": [1e-3, 1e4], "max_iter": 100})
    assert fit.chosen == {"alpha": 1e-3} and fit.dev < 0.01


def test_ecfp_on_regression_runs(config, tmp_path):
    rows = [{"smiles": s, "label": float(len(s))} for s in AROMATIC + ALIPHATIC]
    task_files(tmp_path, {"train": rows[::2], "dev": rows[1::4], "test": rows[3::4]}, "regression")
    config = with_task(config, "esol_like", "smiles", "regression", "rmse")
    metrics = baselines(config, "esol_like", tmp_path / "task", tmp_path / "card.json",
                        *finetune_outputs(tmp_path / "out"))
    assert set(metrics["baselines"]) == {"train_mean",
                                         "ecfp"} and metrics["baselines"]["ecfp"]["chosen"]["alpha"] in GRID["alpha"]


# --- probe ----------------------------------------------------------------------------------


@pytest.mark.parametrize("objective", ["mlm", "ar"])
def test_probe_reports_every_layer_and_picks_the_best_on_dev(objective, config, tiny_tokenizer, tmp_path):
    tiny_encoder(tiny_tokenizer, tmp_path / "model", objective)
    texts = ["the cat sat on the mat", "a dog ran in the park", "the bird sang", "the cat ran",
             "the dog sat", "a bird ran in the park while the cat sang"]
    rows = [{"text": t, "text_pair": None, "label": int("cat" in t)} for t in texts * 3]
    task_files(tmp_path, {"train": rows, "dev": rows[:6], "test": rows[6:12]}, "classification", ["no", "yes"])
    config = with_task(config, "cls", "text", "classification", "accuracy")
    metrics = probe(config, objective, "cls", tmp_path / "model", tmp_path / "task", tmp_path / "card.json",
                    *finetune_outputs(tmp_path / "out"))
    assert [layer["layer"] for layer in metrics["layers"]] == [0, 1, 2]  # embeddings, block 1, block 2
    best = metrics["layers"][metrics["best_layer"]]
    assert best["dev"] == max(layer["dev"] for layer in metrics["layers"])
    assert (metrics["value"], metrics["dev"]) == (best["test"], best["dev"]) and best["chosen"]["C"] in GRID["C"]
    assert metrics["split"] == "test" and (metrics["run"], metrics["task"]) == (objective, "cls")
    assert "cpu_capability" in metrics["arithmetic"]  # the table's footer reads it
    lines = read_lines(tmp_path / "out/predictions.jsonl")
    assert len(lines) == 12 and set(lines[0]) == {"split", "index", "prediction", "label"}


def test_probe_features_pool_real_tokens_only(tiny_tokenizer, tmp_path):
    encoder = tiny_encoder(tiny_tokenizer, tmp_path / "model").eval()
    ids = tiny_tokenizer(["the cat", "the cat sat on the mat while a dog ran"])["input_ids"]
    alone = layer_features(encoder, ids[:1], tiny_tokenizer.pad_token_id, 1, "cpu")
    padded = layer_features(encoder, ids, tiny_tokenizer.pad_token_id, 2, "cpu")
    np.testing.assert_allclose(padded[:, :1], alone, atol=1e-5)  # padding changes nothing
    input_ids, mask = collate(ids[:1], tiny_tokenizer.pad_token_id)
    embeddings = encoder(input_ids, mask, output_hidden_states=True).hidden_states[0]
    np.testing.assert_allclose(alone[0, 0], embeddings[0].mean(0).detach().numpy(), atol=1e-6)


def test_probe_features_stay_in_row_order_across_length_batches(tiny_tokenizer, tmp_path):
    encoder = tiny_encoder(tiny_tokenizer, tmp_path / "model").eval()
    texts = ["the cat sat on the mat", "a dog", "the cat sat on the mat while a dog ran", "the bird", "sang"]
    ids = tiny_tokenizer(texts)["input_ids"]
    alone = np.concatenate([layer_features(encoder, [row], tiny_tokenizer.pad_token_id, 1, "cpu")
                            for row in ids], axis=1)
    batched = layer_features(encoder, ids, tiny_tokenizer.pad_token_id, 2, "cpu")
    np.testing.assert_allclose(batched, alone, atol=1e-5)
