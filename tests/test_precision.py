"""One precision policy for every stage (`maskbench.device.precision`): bfloat16 autocast and
TF32 on CUDA, nothing at all on the CPU unless `precision: bf16` asks for CPU autocast. CUDA is
only named here (torch.device("cuda") needs no GPU; torch.autocast is replaced by a recorder),
and the stages are shown to run their forward passes under the policy by asking them for CPU
bf16 and watching autocast from inside the model."""

from __future__ import annotations

import contextlib

import pytest
import torch

from maskbench import device as devices
from maskbench.controls import probe as probe_module
from maskbench.finetune.loop import train_one
from maskbench.model.encoder import Encoder, EncoderConfig
from maskbench.train.validation import ValidationSet, valid_loss
from tests.helpers import finetune_outputs, task_files, tiny_encoder, with_task

pytestmark = pytest.mark.usefixtures("tracking_store")


@pytest.fixture
def autocast_calls(monkeypatch):
    """The (device type, dtype) of every `torch.autocast` the policy opens, none of them entered."""
    calls = []
    monkeypatch.setattr(torch, "autocast", lambda kind, dtype: calls.append((kind, dtype)) or contextlib.nullcontext())
    return calls


@pytest.mark.parametrize("setting", ["auto", "bf16"])
def test_cuda_autocasts_to_bfloat16(autocast_calls, setting):
    with devices.precision(torch.device("cuda"), setting):
        pass
    assert autocast_calls == [("cuda", torch.bfloat16)]


@pytest.mark.parametrize("device", [torch.device("cpu"), "cpu", torch.device("cuda")])
def test_fp32_opens_no_autocast(autocast_calls, device):
    assert isinstance(devices.precision(device, "fp32"), contextlib.nullcontext) and autocast_calls == []


def test_the_cpu_default_opens_no_autocast_so_results_stay_bit_identical(autocast_calls):
    assert isinstance(devices.precision(torch.device("cpu"), "auto"), contextlib.nullcontext)
    assert autocast_calls == []


def test_cpu_bf16_autocasts_the_cpu():
    with devices.precision("cpu", "bf16"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")


def test_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="precision: 'fp16' is not one of"):
        devices.precision("cpu", "fp16")


@pytest.fixture
def tf32_off():
    """TF32 off for the test, then as it was (the flags are process-wide; monkeypatch cannot
    restore cuBLAS's, which are properties of the module)."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize("kind", ["cuda", "cpu"])
def test_tf32_is_set_up_with_a_cuda_device_only(tf32_off, monkeypatch, kind):
    monkeypatch.setattr(devices, "pick_device", lambda name: torch.device(name))
    assert devices.compute_device(kind, torch.get_num_threads()).type == kind
    on = kind == "cuda"
    assert torch.backends.cuda.matmul.allow_tf32 is on and torch.backends.cudnn.allow_tf32 is on


# --- every stage runs its forward passes under the policy ------------------------------------

def autocast_now() -> torch.dtype | None:
    return torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None


class WatchedTask:
    """A one-batch task that records whether its loss and its evaluation ran under autocast."""

    n_train, train_lengths, metric = 2, [1, 2], "accuracy"

    def __init__(self):
        self.seen = {}

    def build_model(self, view, dropout):
        return torch.nn.Linear(view.width, 1)

    def loss(self, model, index, device):
        self.seen["loss"] = autocast_now()
        return model(torch.ones(1, model.in_features)).float().sum()

    def labelled(self, split):
        return False

    def evaluate(self, model, split, batch, device):
        self.seen[split] = autocast_now()
        return {"accuracy": 1.0}, []


class NoTracking:
    def log_metrics(self, metrics, step=None):
        pass


@pytest.mark.parametrize(("setting", "expected"), [("auto", None), ("bf16", torch.bfloat16)])
def test_fine_tuning_trains_and_evaluates_under_the_policy(tmp_path, setting, expected):
    Encoder(EncoderConfig(vocab_size=20, n_layer=1, n_embd=8, n_head=2, max_position=8)).save_pretrained(tmp_path)
    settings = {"pooler_dropout": 0.0, "pooling": "mean", "max_train_examples": None, "batch_size": 2, "epochs": 1,
                "lr": 1e-3, "weight_decay": 0.0, "warmup_ratio": 0.0, "clip_norm": 1.0, "group_by_length": True,
                "precision": setting}
    task = WatchedTask()
    train_one(task, settings, tmp_path, 0, "cpu", NoTracking(), "watched", [])
    assert task.seen == {"loss": expected, "dev": expected}


class WatchedObjective(torch.nn.Module):
    def masked_nll(self, tokens, masked_at):
        self.seen = autocast_now()
        return torch.tensor(1.0), 1


@pytest.mark.parametrize(("setting", "expected"), [("auto", None), ("bf16", torch.bfloat16)])
def test_validation_loss_is_measured_under_the_policy(setting, expected):
    objective = WatchedObjective()
    valid_loss(objective, [ValidationSet(torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 1, dtype=torch.long))],
               2, "cpu", setting)
    assert objective.seen == expected


class Stop(Exception):
    pass


def test_the_probe_reads_features_under_the_policy(config, tiny_tokenizer, tmp_path, monkeypatch):
    tiny_encoder(tiny_tokenizer, tmp_path / "model")
    rows = [{"text": t, "text_pair": None, "label": i % 2} for i, t in enumerate(["the cat", "a dog", "the bird"] * 2)]
    task_files(tmp_path, {"train": rows, "dev": rows[:2], "test": rows[2:4]}, "classification", ["no", "yes"])
    config = with_task(config, "cls", "text", "classification", "accuracy")
    config["tasks"]["cls"]["overrides"] = {"precision": "bf16"}

    def watched(*args, **kwargs):
        raise Stop(autocast_now())

    monkeypatch.setattr(probe_module, "write_features", watched)
    with pytest.raises(Stop) as stopped:
        probe_module.probe(config, "mlm", "cls", tmp_path / "model", tmp_path / "task", tmp_path / "card.json",
                           *finetune_outputs(tmp_path / "out"))
    assert stopped.value.args == (torch.bfloat16,)
