"""A checkpoint of every objective fine-tunes: sentence classification and extractive QA,
through the same `finetune` entry point the workflow calls."""

from __future__ import annotations

import json

import pytest
import torch

from maskbench.config import read_yaml, schema_path, validate
from maskbench.finetune.loop import finetune
from maskbench.model import Encoder, EncoderConfig
from maskbench.objectives import OBJECTIVES, SpecialTokens, build_objective, encoder_settings
from tests.conftest import REPO

KNOBS = {"mlm": {}, "varlen_mlm": {}, "repeated_mlm": {"k": 2}, "mae_lm": {"decoder_layers": 1},
         "exlm": {"k": 2}, "ar": {}, "dar": {"t": 2}}


@pytest.fixture(scope="module", autouse=True)
def tracking_store(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}")
        yield


def checkpoint(objective_name: str, tokenizer, out_dir):
    """One training step of the objective, saved the way `pretrain` saves an encoder."""
    run = {"objective": objective_name, "knobs": KNOBS[objective_name]}
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(vocab_size=len(tokenizer), n_layer=1, n_embd=32, n_head=2, n_inner=64,
                                    pad_token_id=tokenizer.pad_token_id, **encoder_settings(run, 32)))
    objective = build_objective(run, encoder, SpecialTokens.from_tokenizer(tokenizer))
    tokens = torch.randint(5, len(tokenizer), (4, 32))
    tokens[:, 0], tokens[:, -1] = tokenizer.cls_token_id, tokenizer.sep_token_id
    objective(tokens, torch.Generator().manual_seed(0)).loss.backward()
    encoder.config.pretraining = {**objective.pretraining_info(), "run": objective_name}
    encoder.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def task_files(root, rows_by_split, kind, label_names=None):
    (root / "task").mkdir(parents=True)
    for split, rows in rows_by_split.items():
        (root / "task" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "card.json").write_text(json.dumps({"kind": kind, "label_names": label_names}))
    (root / "download.json").write_text(json.dumps({"source": {"files": {"x": "0" * 64}}}))


def config_for(raw_params, task_spec):
    raw_params["tasks"]["probe"] = {"dataset": "rotten_tomatoes", "modality": "text", "label": "probe",
                                    **task_spec}
    raw_params["finetune"]["settings"].update(epochs=1, batch_size=4, max_len=24, max_train_examples=None,
                                              doc_stride=8, threads=1)
    return validate(raw_params, read_yaml(schema_path(REPO / "params.yaml")))


@pytest.mark.parametrize("objective_name", sorted(OBJECTIVES))
def test_every_objective_fine_tunes(objective_name, tmp_path, tiny_tokenizer, raw_params):
    assert set(KNOBS) == set(OBJECTIVES)
    checkpoint(objective_name, tiny_tokenizer, tmp_path / "model")
    texts = ["the cat sat on the mat", "a dog ran in the park", "the bird sang", "the cat ran"]
    rows = [{"text": t, "text_pair": None, "label": i % 2} for i, t in enumerate(texts * 2)]
    task_files(tmp_path / "cls", {"train": rows, "dev": rows[:4], "test": rows[4:]}, "classification",
               ["no", "yes"])
    config = config_for(raw_params, {"kind": "classification", "metric": "accuracy",
                                     "split": {"method": "random", "dev": 0.1, "test": 0.1, "seed": 0}})
    metrics = finetune(config, objective_name, "probe", 1, tmp_path / "model", tmp_path / "cls/task",
                       tmp_path / "cls/card.json", tmp_path / "cls/download.json", tmp_path / "cls/out")
    assert 0.0 <= metrics["test"] <= 1.0 and metrics["reported_split"] == "test"

    context = "the cat sat on the mat while a dog ran in the park and the bird sang"
    qa = [{"id": str(i), "title": "", "question": q, "context": context,
           "answers": {"text": [a] if a else [], "answer_start": [context.index(a)] if a else []}}
          for i, (q, a) in enumerate([("where did the dog run", "the park"), ("who sang", "the bird"),
                                      ("what did the fish say", None)])]
    task_files(tmp_path / "qa", {"train": qa, "dev": qa, "test": qa}, "qa")
    config = config_for(raw_params, {"kind": "qa", "metric": "squad_v2_f1",
                                     "split": {"method": "random", "dev": 0.1, "test": 0.1, "seed": 0}})
    metrics = finetune(config, objective_name, "probe", 1, tmp_path / "model", tmp_path / "qa/task",
                       tmp_path / "qa/card.json", tmp_path / "qa/download.json", tmp_path / "qa/out")
    assert 0.0 <= metrics["test"] <= 1.0
    predictions = [json.loads(line) for line in (tmp_path / "qa/out/predictions.jsonl").read_text().splitlines()]
    assert {p["id"] for p in predictions if p["split"] == "dev"} == {"0", "1", "2"}


def test_extra_eval_splits_are_scored_at_the_chosen_epoch(tmp_path, tiny_tokenizer, raw_params):
    """MNLI's mismatched dev set: scored with the model chosen on (matched) dev, written beside it;
    `max_eval_examples` caps every scored split."""
    checkpoint("mlm", tiny_tokenizer, tmp_path / "model")
    texts = ["the cat sat on the mat", "a dog ran in the park", "the bird sang", "the cat ran"]
    rows = [{"text": t, "text_pair": "a cat", "label": i % 3} for i, t in enumerate(texts * 3)]
    task_files(tmp_path / "nli", {"train": rows, "dev": rows[:4], "test": [{**r, "label": None} for r in rows[:2]],
                                  "dev_mismatched": rows[4:10]}, "classification", ["e", "n", "c"])
    config = config_for(raw_params, {"kind": "classification", "metric": "accuracy", "split": {"method": "predefined"},
                                     "extra_eval_splits": ["dev_mismatched"]})
    config["finetune"]["settings"]["max_eval_examples"] = 5
    args = (config, "mlm", "probe", 1, tmp_path / "model", tmp_path / "nli/task", tmp_path / "nli/card.json",
            tmp_path / "nli/download.json")
    metrics = finetune(*args, tmp_path / "nli/out")
    assert metrics["reported_split"] == "dev" and metrics["test"] is None
    assert 0.0 <= metrics["extra"]["dev_mismatched"] <= 1.0
    assert metrics["grid"][0]["extra"]["dev_mismatched"]["accuracy"] == metrics["extra"]["dev_mismatched"]
    predictions = [json.loads(line) for line in (tmp_path / "nli/out/predictions.jsonl").read_text().splitlines()]
    assert metrics["eval_examples"] == {"dev": 4, "test": 2, "dev_mismatched": 5}  # at most max_eval_examples
    assert sum(p["split"] == "dev_mismatched" for p in predictions) == 5

    (tmp_path / "nli/task/test_mismatched.jsonl").write_text((tmp_path / "nli/task/test.jsonl").read_text())
    config["tasks"]["probe"]["extra_eval_splits"] = ["test_mismatched"]
    with pytest.raises(ValueError, match=r"\['test_mismatched'\] .* have no labels"):
        finetune(*args, tmp_path / "nli/out3")
    config["tasks"]["probe"]["extra_eval_splits"] = ["dev_mismatched"]
    (tmp_path / "nli/task/dev_mismatched.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="tasks.probe.extra_eval_splits: .* has no dev_mismatched.jsonl"):
        finetune(*args, tmp_path / "nli/out2")
