"""The fine-tuning loop's pieces (`maskbench.finetune.loop`): the fixed evaluation subset, and model
selection over epochs that never keeps an epoch whose dev score is NaN."""

from __future__ import annotations

import math

import pytest
import torch

from maskbench.finetune.loop import eval_subset, train_one
from maskbench.model.encoder import Encoder, EncoderConfig


def test_eval_subset_is_fixed_and_keeps_file_order():
    rows = [{"i": i} for i in range(50)]
    first, again = eval_subset(rows, 10), eval_subset(rows, 10)
    assert first == again and len(first) == 10 and [r["i"] for r in first] == sorted(r["i"] for r in first)
    assert eval_subset(rows, None) is rows and eval_subset(rows, 50) is rows


class ScriptedTask:
    """A task whose dev score per epoch is scripted, to watch model selection."""

    n_train = 4
    train_lengths = [3, 1, 4, 1]

    def __init__(self, metric, dev_scores):
        self.metric, self.dev_scores, self.epoch = metric, list(dev_scores), 0

    def build_model(self, view, dropout):
        return torch.nn.Linear(view.width, 1)

    def loss(self, model, index, device):
        return model.weight.sum() * 0.0

    def labelled(self, split):
        return split == "test"

    def evaluate(self, model, split, batch, device):
        if split == "dev":
            self.epoch += 1
            return {self.metric: self.dev_scores[self.epoch - 1]}, []
        return {self.metric: float(self.epoch)}, []  # test: which epoch was scored


class NoTracking:
    def log_metrics(self, metrics, step=None):
        pass


@pytest.mark.parametrize("clip_norm", [1.0, None])  # None: no clipping (the papers' fine-tuning)
@pytest.mark.parametrize(("metric", "best_epoch"), [("accuracy", 2), ("rmse", 3)])
def test_train_one_never_keeps_a_nan_dev_epoch(metric, best_epoch, clip_norm, tmp_path):
    Encoder(EncoderConfig(vocab_size=20, n_layer=1, n_embd=8, n_head=2, max_position=8)).save_pretrained(tmp_path)
    settings = {"pooler_dropout": 0.0, "pooling": "mean", "max_train_examples": None, "batch_size": 2,
                "epochs": 3, "lr": 1e-3,
                "weight_decay": 0.0, "warmup_ratio": 0.0, "clip_norm": clip_norm, "group_by_length": True,
                "precision": "auto"}
    task = ScriptedTask(metric, [math.nan, 0.5, 0.4])
    best = train_one(task, settings, tmp_path, 0, "cpu", NoTracking(), "probe", [])
    assert best["epoch"] == best_epoch and best["test"] == {metric: float(best_epoch)}
