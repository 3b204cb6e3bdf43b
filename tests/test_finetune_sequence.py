"""Sequence-level fine-tuning tasks (`maskbench.finetune.sequence`): masked multitask and regression
losses, standardised regression targets mapped back, splits without rows, and the ROC-AUC tasks
left out named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from maskbench.finetune.sequence import SequenceTask


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


def test_predictions_come_back_in_row_order_whatever_the_length_batches(tiny_tokenizer):
    """Evaluation batches rows by length; each prediction must still land on its own row."""
    words = ["the", "cat", "sat", "on", "mat", "dog"]
    rows = [{"text": " ".join(words[: 1 + (i * 7) % 6]), "text_pair": None, "label": float(i)} for i in range(11)]
    task = SequenceTask("regression", "rmse", {"train": rows, "dev": rows}, tiny_tokenizer, 16, None)

    class Length(torch.nn.Module):  # predicts the row's real length, standardised away and back
        def forward(self, input_ids, attention_mask):
            return ((attention_mask.sum(1, keepdim=True).float() - task.mean) / task.std)

    lengths = [len(ids) for ids in task.ids["dev"]]
    assert len(set(lengths)) > 1
    assert task.predict(Length(), "dev", 3, "cpu") == pytest.approx(lengths)


def test_grouped_epochs_reorder_the_subset_and_pad_less():
    from maskbench.finetune.inputs import epoch_order

    rng = np.random.default_rng(0)
    lengths = list(rng.integers(5, 100, size=400))
    subset = np.sort(rng.choice(400, 256, replace=False))
    grouped = epoch_order(subset, lengths, 16, np.random.default_rng(1), group_by_length=True)
    shuffled = epoch_order(subset, lengths, 16, np.random.default_rng(1), group_by_length=False)
    assert sorted(grouped) == sorted(shuffled) == list(subset)

    def padded(order):
        return sum(16 * max(lengths[i] for i in order[b:b + 16]) for b in range(0, len(order), 16))

    assert padded(grouped) < 0.8 * padded(shuffled)
    again = epoch_order(subset, lengths, 16, np.random.default_rng(1), group_by_length=True)
    assert list(grouped) == list(again)  # the seed decides the order
