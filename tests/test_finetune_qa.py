"""Extractive QA fine-tuning (`maskbench.finetune.qa`): long passages as windows with gold spans,
span decoding and the no-answer score, a training step and evaluation, splits without rows, and
each SQuAD metric's own dev threshold applied on test."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from maskbench.finetune import qa
from maskbench.finetune.qa import QATask, best_spans, windows


@pytest.fixture(scope="module")
def qa_rows():
    context = "the cat sat on the mat while the dog ran in the park and the bird sang in the tree"
    return [
        {"id": "a", "question": "where did the dog run", "context": context,
         "answers": {"text": ["the park"], "answer_start": [context.index("the park")]}},
        {"id": "b", "question": "what did the fish say", "context": context,
         "answers": {"text": [], "answer_start": []}},
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


def test_qa_task_trains_and_evaluates(qa_rows, tiny_tokenizer):
    from maskbench.finetune.view import EncoderView
    from maskbench.model.encoder import Encoder, EncoderConfig

    encoder = Encoder(EncoderConfig(vocab_size=len(tiny_tokenizer), n_layer=1, n_embd=16, n_head=2, max_position=64))
    task = QATask("squad_v2_f1", {"train": qa_rows, "dev": qa_rows, "test": qa_rows}, tiny_tokenizer, 32, 8, 10)
    model = task.build_model(EncoderView(encoder), 0.0)
    task.loss(model, np.arange(task.n_train), "cpu").backward()
    metrics, records = task.evaluate(model.eval(), "dev", 4, "cpu")
    assert 0.0 <= metrics["squad_v2_f1"] <= 1.0 and {r["id"] for r in records} == {"a", "b"}


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


def test_qa_scores_do_not_depend_on_the_evaluation_batch(qa_rows, tiny_tokenizer, monkeypatch):
    """Windows are evaluated in batches of similar length; the answers must not change with it."""
    from maskbench.finetune.view import EncoderView
    from maskbench.model.encoder import Encoder, EncoderConfig

    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(vocab_size=len(tiny_tokenizer), n_layer=1, n_embd=16, n_head=2, max_position=64))
    task = QATask("squad_v2_f1", {"train": qa_rows, "dev": qa_rows}, tiny_tokenizer, 32, 8, 10)
    model = task.build_model(EncoderView(encoder), 0.0).eval()
    assert len({len(ids) for ids in task.win["dev"]["ids"]}) > 1  # windows of several lengths
    _, together = task.evaluate(model, "dev", 64, "cpu")
    monkeypatch.setattr(qa, "batches_by_length", lambda ids, size: [np.array([i]) for i in range(len(ids))])
    _, one_by_one = task.evaluate(model, "dev", 1, "cpu")  # each window alone, in file order
    assert [r["prediction"] for r in one_by_one] == [r["prediction"] for r in together]
    assert [r["no_answer_score"]
            for r in one_by_one] == pytest.approx([r["no_answer_score"] for r in together], abs=1e-5)
