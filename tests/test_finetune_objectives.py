"""A checkpoint of every objective fine-tunes: sentence classification and extractive QA,
through the same `finetune` entry point the workflow calls; tasks without a test split, causal
encoders' no-answer position, and ROC-AUC tasks without both classes."""

from __future__ import annotations

import json
import logging
import math

import pytest
import torch

from maskbench.finetune.loop import finetune
from maskbench.finetune.qa import SpanHead, null_at_slot_zero
from maskbench.finetune.view import EncoderView
from maskbench.model.encoder import Encoder
from maskbench.io import DamagedFile
from tests.helpers import OBJECTIVE_NAMES, checkpoint, config_with_probe_task, finetune_outputs, task_files

pytestmark = pytest.mark.usefixtures("tracking_store")


@pytest.mark.parametrize("objective_name", OBJECTIVE_NAMES)
def test_every_objective_fine_tunes(objective_name, tmp_path, tiny_tokenizer, raw_params):
    checkpoint(objective_name, tiny_tokenizer, tmp_path / "model")
    texts = ["the cat sat on the mat", "a dog ran in the park", "the bird sang", "the cat ran"]
    rows = [{"text": t, "text_pair": None, "label": i % 2} for i, t in enumerate(texts * 2)]
    task_files(tmp_path / "cls", {"train": rows, "dev": rows[:4], "test": rows[4:]}, "classification",
               ["no", "yes"])
    config = config_with_probe_task(raw_params, {"kind": "classification", "metric": "accuracy",
                                                 "split": {"method": "random", "dev": 0.1, "test": 0.1, "seed": 0}})
    metrics = finetune(config, objective_name, "probe", 1, tmp_path / "model", tmp_path / "cls/task",
                       tmp_path / "cls/card.json", tmp_path / "cls/download.json",
                       *finetune_outputs(tmp_path / "cls/out"))
    assert 0.0 <= metrics["test"] <= 1.0 and metrics["reported_split"] == "test"

    context = "the cat sat on the mat while a dog ran in the park and the bird sang"
    qa = [{"id": str(i), "title": "", "question": q, "context": context,
           "answers": {"text": [a] if a else [], "answer_start": [context.index(a)] if a else []}}
          for i, (q, a) in enumerate([("where did the dog run", "the park"), ("who sang", "the bird"),
                                      ("what did the fish say", None)])]
    task_files(tmp_path / "qa", {"train": qa, "dev": qa, "test": qa}, "qa")
    config = config_with_probe_task(raw_params, {"kind": "qa", "metric": "squad_v2_f1",
                                                 "split": {"method": "random", "dev": 0.1, "test": 0.1, "seed": 0}})
    metrics = finetune(config, objective_name, "probe", 1, tmp_path / "model", tmp_path / "qa/task",
                       tmp_path / "qa/card.json", tmp_path / "qa/download.json", *finetune_outputs(tmp_path / "qa/out"))
    assert 0.0 <= metrics["test"] <= 1.0
    predictions = [json.loads(line) for line in (tmp_path / "qa/out/predictions.jsonl").read_text().splitlines()]
    assert {p["id"] for p in predictions if p["split"] == "dev"} == {"0", "1", "2"}


QA_CONTEXT = "the cat sat on the mat while a dog ran in the park and the bird sang"


def qa_rows():
    return [{"id": str(i), "title": "", "question": q, "context": QA_CONTEXT,
             "answers": {"text": [a] if a else [], "answer_start": [QA_CONTEXT.index(a)] if a else []}}
            for i, (q, a) in enumerate([("where did the dog run", "the park"), ("who sang", "the bird"),
                                        ("what did the fish say", None)])]


def test_predefined_qa_without_a_test_split_reports_dev(tmp_path, tiny_tokenizer, raw_params):
    """SQuAD 2.0 (hub or official JSON) ships train and dev only: dev is scored and reported."""
    checkpoint("mlm", tiny_tokenizer, tmp_path / "model")
    task_files(tmp_path / "qa", {"train": qa_rows(), "dev": qa_rows()}, "qa")
    config = config_with_probe_task(raw_params, {"kind": "qa", "metric": "squad_v2_f1",
                                                 "split": {"method": "predefined"}})
    metrics = finetune(config, "mlm", "probe", 1, tmp_path / "model", tmp_path / "qa/task", tmp_path / "qa/card.json",
                       tmp_path / "qa/download.json", *finetune_outputs(tmp_path / "qa/out"))
    assert metrics["reported_split"] == "dev" and metrics["test"] is None and 0.0 <= metrics["dev"] <= 1.0
    assert metrics["eval_examples"] == {"dev": 3} and metrics["grid"][0]["test"] == {}
    assert "squad_v2_exact" in metrics["grid"][0]["dev"]
    # the task stage writes train and dev: deleted since, not a params problem
    (tmp_path / "qa/task/dev.jsonl").unlink()
    with pytest.raises(DamagedFile, match=r"qa/task/dev\.jsonl: missing from .*qa/task \(which holds \['train'\]\)"):
        finetune(config, "mlm", "probe", 1, tmp_path / "model", tmp_path / "qa/task", tmp_path / "qa/card.json",
                 tmp_path / "qa/download.json", *finetune_outputs(tmp_path / "qa/out2"))


@pytest.mark.parametrize("objective_name", ["ar", "dar"])
def test_causal_encoders_read_no_answer_at_the_last_real_token(objective_name, tmp_path, tiny_tokenizer):
    """Under causal attention [CLS] sees only itself: a no-answer logit read there would be the
    same for every input. Read at the last real token, it depends on the whole window."""
    checkpoint(objective_name, tiny_tokenizer, tmp_path / "model")
    head = SpanHead(EncoderView(Encoder.from_pretrained(tmp_path / "model"))).eval()
    cls, sep, pad = tiny_tokenizer.cls_token_id, tiny_tokenizer.sep_token_id, tiny_tokenizer.pad_token_id
    input_ids = torch.tensor([[cls, 10, 11, 12, sep], [cls, 20, 21, 22, sep], [cls, 20, sep, pad, pad]])
    mask = (input_ids != pad).long()
    with torch.no_grad():
        start, end = head(input_ids, mask)
        assert start[0, 0] != start[1, 0] and end[0, 0] != end[1, 0]
        null_start = head.out(head.view(input_ids, mask).states)[..., 0]
    assert torch.allclose(start[:, 0], null_start[torch.arange(3), torch.tensor([4, 4, 2])])
    assert (start[:2, 4] == -1e4).all() and start[2, 2] == -1e4  # the option is not counted twice


def test_bidirectional_encoders_keep_no_answer_on_cls():
    logits = torch.arange(12.0).reshape(2, 6)
    assert torch.equal(null_at_slot_zero(logits, torch.zeros(2, dtype=torch.long)), logits)


def test_roc_auc_without_both_classes_is_recorded_not_hidden(tmp_path, tiny_tokenizer, raw_params, caplog):
    checkpoint("mlm", tiny_tokenizer, tmp_path / "model")
    train = [{"smiles": s, "labels": [i % 2, 1]} for i, s in enumerate(["the cat", "the dog", "a bird", "the mat"])]
    one_class = [{**r, "labels": [1, 1]} for r in train]
    task_files(tmp_path / "mol", {"train": train, "dev": one_class, "test": train}, "multitask_classification")
    (tmp_path / "mol/card.json").write_text(json.dumps({"kind": "multitask_classification",
                                                        "task_names": ["toxic", "inert"]}))
    config = config_with_probe_task(raw_params, {"kind": "multitask_classification", "metric": "roc_auc",
                                                 "split": {"method": "predefined"}})
    with caplog.at_level(logging.WARNING, logger="maskbench.finetune.loop"):
        metrics = finetune(config, "mlm", "probe", 1, tmp_path / "model", tmp_path / "mol/task",
                           tmp_path / "mol/card.json", tmp_path / "mol/download.json",
                           *finetune_outputs(tmp_path / "mol/out"))
    assert math.isnan(metrics["dev"]) and 0.0 <= metrics["test"] <= 1.0
    assert sorted(metrics["roc_auc_skipped"]["dev"]) == ["inert", "toxic"]
    assert list(metrics["roc_auc_skipped"]["test"]) == ["inert"]
    assert "ROC-AUC on dev leaves out 2 task(s)" in caplog.text and "inert" in caplog.text
    assert json.loads((tmp_path / "mol/out/metrics.json").read_text())["roc_auc_skipped"] == metrics["roc_auc_skipped"]


def test_extra_eval_splits_are_scored_at_the_chosen_epoch(tmp_path, tiny_tokenizer, raw_params):
    """MNLI's mismatched dev set: scored with the model chosen on (matched) dev, written beside it;
    `max_eval_examples` caps every scored split."""
    checkpoint("mlm", tiny_tokenizer, tmp_path / "model")
    texts = ["the cat sat on the mat", "a dog ran in the park", "the bird sang", "the cat ran"]
    rows = [{"text": t, "text_pair": "a cat", "label": i % 3} for i, t in enumerate(texts * 3)]
    task_files(tmp_path / "nli", {"train": rows, "dev": rows[:4], "test": [{**r, "label": None} for r in rows[:2]],
                                  "dev_mismatched": rows[4:10]}, "classification", ["e", "n", "c"])
    config = config_with_probe_task(raw_params, {"kind": "classification", "metric": "accuracy",
                                                 "split": {"method": "predefined"},
                                                 "extra_eval_splits": ["dev_mismatched"]})
    config["finetune"]["settings"]["max_eval_examples"] = 5
    args = (config, "mlm", "probe", 1, tmp_path / "model", tmp_path / "nli/task", tmp_path / "nli/card.json",
            tmp_path / "nli/download.json")
    metrics = finetune(*args, *finetune_outputs(tmp_path / "nli/out"))
    assert metrics["reported_split"] == "dev" and metrics["test"] is None
    assert 0.0 <= metrics["extra"]["dev_mismatched"] <= 1.0
    assert metrics["grid"][0]["extra"]["dev_mismatched"]["accuracy"] == metrics["extra"]["dev_mismatched"]
    predictions = [json.loads(line) for line in (tmp_path / "nli/out/predictions.jsonl").read_text().splitlines()]
    assert metrics["eval_examples"] == {"dev": 4, "test": 2, "dev_mismatched": 5}  # at most max_eval_examples
    assert sum(p["split"] == "dev_mismatched" for p in predictions) == 5

    (tmp_path / "nli/task/test_mismatched.jsonl").write_text((tmp_path / "nli/task/test.jsonl").read_text())
    config["tasks"]["probe"]["extra_eval_splits"] = ["test_mismatched"]
    with pytest.raises(ValueError, match=r"\['test_mismatched'\] .* have no labels"):
        finetune(*args, *finetune_outputs(tmp_path / "nli/out3"))
    config["tasks"]["probe"]["extra_eval_splits"] = ["dev_mismatched"]
    (tmp_path / "nli/task/dev_mismatched.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="tasks.probe.extra_eval_splits: .* has no dev_mismatched.jsonl"):
        finetune(*args, *finetune_outputs(tmp_path / "nli/out2"))


@pytest.mark.parametrize("objective_name", ["mlm", "exlm", "ar"])
def test_pooling_reads_what_the_setting_names(objective_name, tmp_path, tiny_tokenizer):
    """`pooling: first` reads the objective's pool position ([CLS]; AR: the last real token);
    `pooling: mean` averages the encoder's real final states, so padding a row changes nothing."""
    checkpoint(objective_name, tiny_tokenizer, tmp_path / "model")
    encoder = Encoder.from_pretrained(tmp_path / "model").eval()
    ids = torch.tensor([[tiny_tokenizer.cls_token_id, 7, 8, 9, tiny_tokenizer.sep_token_id]])
    padded = torch.cat([ids, torch.full((1, 3), tiny_tokenizer.pad_token_id)], dim=1)
    mask, padded_mask = torch.ones_like(ids), torch.cat([torch.ones_like(ids), torch.zeros(1, 3, dtype=torch.long)], 1)
    with torch.no_grad():
        mean, mean_padded = (EncoderView(encoder, "mean")(i, m).pooled for i, m in ((ids, mask), (padded, padded_mask)))
        first = EncoderView(encoder, "first")(ids, mask)
    torch.testing.assert_close(mean, mean_padded, atol=1e-5, rtol=1e-5)
    assert torch.equal(first.pooled[0], first.states[0, first.pool_position[0]])
    assert not torch.allclose(mean, first.pooled)
    with pytest.raises(ValueError, match="pooling='cls'; expected one of"):
        EncoderView(encoder, "cls")
