"""Fine-tuning pieces: metrics on hand-worked cases, aggregation over seeds and grids (NaN
scores, `aggregate`, `also_report`, ROC-AUC's left-out tasks), QA windows, span decoding and
no-answer thresholds, masked losses, and model selection over epochs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from maskbench.eval.metrics import all_scores, higher_is_better, score
from maskbench.finetune import qa
from maskbench.eval.aggregate import aggregate
from maskbench.finetune.loop import eval_subset, train_one
from maskbench.finetune.qa import QATask, best_spans, windows
from maskbench.finetune.sequence import SequenceTask
from maskbench.model import Encoder, EncoderConfig


def probs(classes, n=2):
    return np.eye(n)[classes] * 0.8 + 0.1


def test_metrics_on_hand_worked_cases():
    y = np.array([0, 1, 1, 0])
    p = probs([0, 1, 0, 0])
    assert score("accuracy", y, p) == 0.75
    # confusion: TP=1 TN=2 FP=0 FN=1 → MCC = (1·2 − 0·1)/sqrt(1·2·3·2) = 2/sqrt(12)
    assert score("matthews_corr", y, p) == pytest.approx(2 / math.sqrt(12))
    assert score("f1", y, p) == pytest.approx(2 / 3)  # precision 1, recall 1/2
    assert score("spearman", np.array([1.0, 2, 3, 4]), np.array([10.0, 20, 30, 25])) == pytest.approx(0.8)
    assert score("rmse", np.array([1.0, np.nan, 3.0]), np.array([2.0, 9.0, 3.0])) == pytest.approx(math.sqrt(0.5))
    # ROC-AUC: of the 4 (pos, neg) pairs, 3 are ordered → 0.75; task 2 has one class and is left out
    y_multi = np.array([[0, 1], [0, 1], [1, np.nan], [1, 1]])
    s_multi = np.array([[0.1, 0.5], [0.4, 0.5], [0.35, 0.5], [0.8, 0.5]])
    assert score("roc_auc", y_multi, s_multi) == 0.75
    assert not higher_is_better("rmse") and higher_is_better("roc_auc")


def test_all_scores_adds_companions():
    scores = all_scores("classification", "matthews_corr", np.array([0, 1, 1, 0]), probs([0, 1, 0, 0]))
    assert list(scores) == ["matthews_corr", "accuracy", "f1"]
    three_class = all_scores("classification", "accuracy", np.array([0, 1, 2]), probs([0, 1, 2], 3))
    assert "f1" not in three_class


def seed_metrics(devs, tests, metric="accuracy"):
    """Fine-tune metrics of one seed over a grid: dev and test score per grid point."""
    return {"grid": [{"settings": {"lr": i}, "dev": {metric: d}, "test": {metric: t} if t is not None else {}}
                     for i, (d, t) in enumerate(zip(devs, tests))]}


def config_with(modality, metric="accuracy", seeds=(1, 2, 3)):
    return {"finetune": {"seeds": list(seeds)},
            "tasks": {"t": {"metric": metric, "label": "T", "modality": modality}}}


def test_aggregate_picks_grid_point_by_median_dev_and_reports_median_for_text():
    metrics = {1: seed_metrics([0.5, 0.7], [None, None]), 2: seed_metrics([0.9, 0.6], [None, None]),
               3: seed_metrics([0.4, 0.65], [None, None])}
    summary = aggregate(config_with("text"), "r", "t", metrics)
    assert summary["grid_point"] == 1  # median dev 0.65 beats 0.5
    assert summary["split"] == "dev" and summary["aggregate"] == "median" and summary["value"] == 0.65


def test_eval_subset_is_fixed_and_keeps_file_order():
    rows = [{"i": i} for i in range(50)]
    first, again = eval_subset(rows, 10), eval_subset(rows, 10)
    assert first == again and len(first) == 10 and [r["i"] for r in first] == sorted(r["i"] for r in first)
    assert eval_subset(rows, None) is rows and eval_subset(rows, 50) is rows


def test_aggregate_summarises_extra_splits_at_the_chosen_point():
    def seed(devs, mismatched):
        metrics = seed_metrics(devs, [None, None])
        for point, value in zip(metrics["grid"], mismatched):
            point["extra"] = {"dev_mismatched": {"accuracy": value}}
        return metrics

    config = config_with("text")
    config["tasks"]["t"]["extra_eval_splits"] = ["dev_mismatched"]
    metrics = {1: seed([0.5, 0.7], [0.1, 0.71]), 2: seed([0.9, 0.6], [0.2, 0.62]), 3: seed([0.4, 0.65], [0.3, 0.66])}
    summary = aggregate(config, "r", "t", metrics)
    assert summary["grid_point"] == 1 and summary["value"] == 0.65
    assert summary["extra"]["dev_mismatched"]["value"] == 0.66
    assert summary["extra"]["dev_mismatched"]["scores"] == {"1": 0.71, "2": 0.62, "3": 0.66}


def test_aggregate_reports_test_mean_std_for_molecules_and_lower_rmse():
    metrics = {1: seed_metrics([1.0, 0.5], [1.1, 0.6], "rmse"), 2: seed_metrics([1.0, 0.7], [1.2, 0.8], "rmse")}
    summary = aggregate(config_with("smiles", "rmse"), "r", "t", metrics)
    assert summary["grid_point"] == 1 and summary["split"] == "test"
    assert summary["value"] == pytest.approx(0.7) and summary["std"] == pytest.approx(np.std([0.6, 0.8], ddof=1))
    assert summary["seeds_missing"] == [3]


@pytest.fixture(scope="module")
def qa_rows():
    context = "the cat sat on the mat while the dog ran in the park and the bird sang in the tree"
    return [
        {"id": "a", "question": "where did the dog run", "context": context,
         "answers": {"text": ["the park"], "answer_start": [context.index("the park")]}},
        {"id": "b", "question": "what did the fish say", "context": context, "answers": {"text": [], "answer_start": []}},
    ]


def test_long_passages_become_windows_with_gold_spans(qa_rows, tiny_tokenizer):
    win = windows(qa_rows, tiny_tokenizer, max_len=16, doc_stride=4)
    assert len(win["ids"]) > len(qa_rows) and all(len(ids) <= 16 for ids in win["ids"])
    for w, (start, end) in enumerate(win["gold"]):
        row = qa_rows[win["example"][w]]
        if (start, end) != (0, 0):
            offsets = win["offsets"][w]
            assert row["context"][offsets[start][0]:offsets[end][1]] == "the park"
    assert any(g != (0, 0) for g in win["gold"])  # the window holding the answer is labelled
    assert all(g == (0, 0) for w, g in enumerate(win["gold"]) if win["example"][w] == 1)


def test_best_span_and_no_answer_score(qa_rows, tiny_tokenizer):
    win = windows(qa_rows[:1], tiny_tokenizer, max_len=64, doc_stride=16)
    offsets = win["offsets"][0]
    start, end = win["gold"][0]
    s = np.full(len(offsets), -5.0)
    e = np.full(len(offsets), -5.0)
    s[start], e[end], s[0], e[0] = 3.0, 3.0, 1.0, 1.0
    answers, na = best_spans(qa_rows[:1], win, [s], [e], max_answer_tokens=30)
    assert answers["a"] == "the park" and na["a"] == pytest.approx(2.0 - 6.0)
    answers, _ = best_spans(qa_rows[:1], win, [s], [e], max_answer_tokens=1)  # "the park" is 2 tokens
    assert answers["a"] != "the park"


def test_multitask_loss_ignores_missing_labels(tiny_tokenizer):
    rows = [{"smiles": "the cat", "labels": [1, None]}, {"smiles": "the dog", "labels": [0, 1]}]
    task = SequenceTask("multitask_classification", "roc_auc", {"train": rows, "dev": rows, "test": rows},
                        tiny_tokenizer, 16, None)

    class Fixed(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return torch.tensor([[0.0, 123.0], [0.0, 0.0]])

    expected = float(np.log(2))  # three known labels, every logit 0 → BCE = log 2 each
    assert task.loss(Fixed(), np.array([0, 1]), "cpu").item() == pytest.approx(expected)


def test_regression_is_standardised_and_mapped_back(tiny_tokenizer):
    rows = [{"text": "the cat", "text_pair": None, "label": v} for v in (10.0, 20.0, 30.0)]
    task = SequenceTask("regression", "rmse", {"train": rows, "dev": rows, "test": rows}, tiny_tokenizer, 16, None)

    class Zero(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return torch.zeros(len(input_ids), 1)

    assert task.predict(Zero(), "dev", 8, "cpu") == pytest.approx([20.0] * 3)  # 0 ↦ the train mean


def test_qa_task_trains_and_evaluates(qa_rows, tiny_tokenizer):
    from maskbench.finetune.view import EncoderView
    from maskbench.model import Encoder, EncoderConfig

    encoder = Encoder(EncoderConfig(vocab_size=len(tiny_tokenizer), n_layer=1, n_embd=16, n_head=2, max_position=64))
    task = QATask("squad_v2_f1", {"train": qa_rows, "dev": qa_rows, "test": qa_rows}, tiny_tokenizer, 32, 8, 10)
    model = task.build_model(EncoderView(encoder), 0.0)
    task.loss(model, np.arange(task.n_train), "cpu").backward()
    metrics, records = task.evaluate(model.eval(), "dev", 4, "cpu")
    assert 0.0 <= metrics["squad_v2_f1"] <= 1.0 and {r["id"] for r in records} == {"a", "b"}


def test_aggregate_honours_the_tasks_aggregate_key():
    """ExLM Tab. 6 reports Repeated MLM on text as the mean of 3 seeds."""
    metrics = {1: seed_metrics([0.5], [None]), 2: seed_metrics([0.6], [None]), 3: seed_metrics([0.9], [None])}
    config = config_with("text")
    assert aggregate(config, "r", "t", metrics)["value"] == 0.6
    config["tasks"]["t"]["aggregate"] = "mean"
    summary = aggregate(config, "r", "t", metrics)
    assert summary["aggregate"] == "mean" and summary["value"] == pytest.approx(2 / 3)


def test_aggregate_reports_also_report_metrics_at_the_chosen_point():
    def seed(devs, tests, f1s):
        metrics = seed_metrics(devs, tests)
        for point, f1 in zip(metrics["grid"], f1s):
            point["test"]["f1"] = f1
        return metrics

    config = config_with("text")
    config["tasks"]["t"]["also_report"] = ["f1"]
    metrics = {1: seed([0.5, 0.7], [0.5, 0.7], [0.1, 0.71]), 2: seed([0.9, 0.6], [0.9, 0.6], [0.2, 0.62]),
               3: seed([0.4, 0.65], [0.4, 0.65], [0.3, 0.66])}
    summary = aggregate(config, "r", "t", metrics)
    assert summary["grid_point"] == 1 and summary["split"] == "test"
    f1 = summary["also_report"]["f1"]
    assert f1["value"] == 0.66 and f1["scores"] == {"1": 0.71, "2": 0.62, "3": 0.66}
    assert f1["std"] == pytest.approx(np.std([0.71, 0.62, 0.66], ddof=1))

    config["tasks"]["t"]["also_report"] = ["matthews_corr"]
    with pytest.raises(ValueError, match="recorded no 'matthews_corr' on test"):
        aggregate(config, "r", "t", metrics)


@pytest.mark.parametrize("metric", ["accuracy", "rmse"])
def test_aggregate_never_picks_a_grid_point_with_a_nan_median_dev(metric):
    metrics = {s: seed_metrics([math.nan, 0.5], [0.1, 0.2], metric) for s in (1, 2, 3)}
    summary = aggregate(config_with("smiles", metric), "r", "t", metrics)
    assert summary["grid_point"] == 1 and summary["value"] == pytest.approx(0.2)


def test_aggregate_carries_roc_auc_skipped_tasks():
    metrics = {s: seed_metrics([0.7], [0.6], "roc_auc") for s in (1, 2)}
    why = "only one class present (0 positive of 5 labelled)"
    for m in metrics.values():
        m["grid"][0]["test"]["roc_auc_skipped"] = {"NR-AR": why}
        m["grid"][0]["dev"]["roc_auc_skipped"] = {}
    summary = aggregate(config_with("smiles", "roc_auc"), "r", "t", metrics)
    assert summary["roc_auc_skipped"] == {"dev": {}, "test": {"NR-AR": why}}


class ScriptedTask:
    """A task whose dev score per epoch is scripted, to watch model selection."""

    n_train = 4

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
    settings = {"pooler_dropout": 0.0, "max_train_examples": None, "batch_size": 2, "epochs": 3, "lr": 1e-3,
                "weight_decay": 0.0, "warmup_ratio": 0.0, "clip_norm": clip_norm}
    task = ScriptedTask(metric, [math.nan, 0.5, 0.4])
    best = train_one(task, settings, tmp_path, 0, "cpu", NoTracking(), "probe", [])
    assert best["epoch"] == best_epoch and best["test"] == {metric: float(best_epoch)}


def test_qa_splits_without_rows_have_no_windows(qa_rows, tiny_tokenizer):
    empty = windows([], tiny_tokenizer, max_len=32, doc_stride=8)
    assert empty == {"ids": [], "example": [], "offsets": [], "gold": []}
    task = QATask("squad_v2_f1", {"train": qa_rows, "dev": qa_rows, "test": []}, tiny_tokenizer, 32, 8, 10)
    assert not task.labelled("test") and not task.labelled("dev_mismatched") and task.labelled("dev")


def test_each_squad_metric_uses_its_own_dev_threshold_on_test(tiny_tokenizer, monkeypatch):
    """Dev: EM is best answering only na ≤ 0.1 (the exact answer), F1 also answering the partial
    one (na 0.5). Test applies those thresholds: its exact answer at na 0.3 counts for F1, not EM."""
    context = "the cat sat on the mat while the dog ran in the park and the bird sang in the tree"

    def row(qid, answer):
        answers = {"text": [answer] if answer else [], "answer_start": [context.index(answer)] if answer else []}
        return {"id": qid, "question": "what", "context": context, "answers": answers}

    dev = [row("exact", "bird"), row("partial", "dog ran"), row("none", None)]
    test = [row("late", "dog ran")]
    decoded = {"dev": ({"exact": "bird", "partial": "ran", "none": "cat"}, {"exact": 0.1, "partial": 0.5, "none": 0.9}),
               "test": ({"late": "dog ran"}, {"late": 0.3})}
    monkeypatch.setattr(qa, "best_spans", lambda rows, *_: decoded["dev" if len(rows) == 3 else "test"])
    task = QATask("squad_v2_f1", {"train": dev, "dev": dev, "test": test}, tiny_tokenizer, 32, 8, 10)

    def model(input_ids, mask):
        return torch.zeros(input_ids.shape), torch.zeros(input_ids.shape)

    dev_metrics, _ = task.evaluate(model, "dev", 8, "cpu")
    assert dev_metrics["null_threshold_exact"] == 0.1 and dev_metrics["null_threshold_f1"] == 0.5
    test_metrics, records = task.evaluate(model, "test", 8, "cpu")
    assert test_metrics["null_threshold_f1"] == 0.5 and test_metrics["null_threshold_exact"] == 0.1
    assert test_metrics["squad_v2_f1"] == 1.0 and test_metrics["squad_v2_exact"] == 0.0
    assert records[0]["prediction"] == "dog ran"  # written at the headline (F1) threshold


def test_regression_loss_uses_standardised_targets_and_skips_missing_labels(tiny_tokenizer):
    rows = [{"text": "the cat", "text_pair": None, "label": v} for v in (10.0, 20.0, 30.0, None)]
    task = SequenceTask("regression", "rmse", {"train": rows, "dev": rows}, tiny_tokenizer, 16, None)

    class Zero(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return torch.zeros(len(input_ids), 1, requires_grad=True)

    # standardised targets are (−1.22, 0, 1.22): a zero output (the train mean) has loss 1
    assert task.loss(Zero(), np.arange(4), "cpu").item() == pytest.approx(1.0)
    assert task.loss(Zero(), np.array([3]), "cpu").item() == 0.0  # a batch without labels


def test_sequence_tasks_accept_a_split_without_rows(tiny_tokenizer):
    rows = [{"smiles": "the cat", "labels": [1, None]}, {"smiles": "the dog", "labels": [0, 1]}]
    task = SequenceTask("multitask_classification", "roc_auc", {"train": rows, "dev": rows, "test": []},
                        tiny_tokenizer, 16, ["a", "b"])
    assert task.n_outputs == 2 and not task.labelled("test") and task.labelled("dev")
    single = [{"smiles": "the cat", "label": 1.5}, {"smiles": "the dog", "label": 0.5}]
    assert not SequenceTask("regression", "rmse", {"train": single, "dev": single, "test": []},
                            tiny_tokenizer, 16, None).labelled("test")


def test_roc_auc_names_the_tasks_it_leaves_out(tiny_tokenizer):
    rows = [{"smiles": "the cat", "labels": [1, 0]}, {"smiles": "the dog", "labels": [0, 0]}]
    task = SequenceTask("multitask_classification", "roc_auc", {"train": rows, "dev": rows}, tiny_tokenizer, 16,
                        ["toxic", "inert"])

    class Fixed(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return torch.tensor([[2.0, 0.0], [-2.0, 0.0]])

    metrics, _ = task.evaluate(Fixed(), "dev", 8, "cpu")
    assert metrics["roc_auc"] == 1.0 and list(metrics["roc_auc_skipped"]) == ["inert"]
