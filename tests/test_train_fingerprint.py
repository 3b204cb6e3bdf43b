"""Which changed settings a checkpoint resumes under (`maskbench.train.fingerprint`)."""

from __future__ import annotations

import pytest

from maskbench.config import params_hash
from maskbench.config.settings import PRETRAIN_OPERATIONAL
from maskbench.train.fingerprint import StaleCheckpoint, check_resumable, fingerprint

SETTINGS = {"lr": 1e-3, "batch_size": 32, "micro_batch_size": 32, "threads": 1, "eval_every": 100, "device": "auto",
            "compile": False, "seed": 0}
INPUTS = {"run": {"objective": "mlm"}, "settings": SETTINGS, "model": {"layers": 2}, "data": {"tokens": 10}}


def saved(inputs=INPUTS) -> dict:
    return {"fingerprint": fingerprint(inputs, PRETRAIN_OPERATIONAL), "inputs": inputs}


def with_settings(**changed) -> dict:
    return {**INPUTS, "settings": {**SETTINGS, **changed}}


def test_operational_settings_change_the_log_not_the_fingerprint():
    moved = with_settings(threads=8, micro_batch_size=8, device="cuda", compile=True, eval_every=500)
    assert fingerprint(moved, PRETRAIN_OPERATIONAL) == fingerprint(INPUTS, PRETRAIN_OPERATIONAL)
    changes = check_resumable(saved(), moved, PRETRAIN_OPERATIONAL, "ckpt", "")
    assert changes == ["settings.compile: False -> True", "settings.device: 'auto' -> 'cuda'",
                       "settings.eval_every: 100 -> 500", "settings.micro_batch_size: 32 -> 8",
                       "settings.threads: 1 -> 8"]
    assert check_resumable(saved(), INPUTS, PRETRAIN_OPERATIONAL, "ckpt", "") == []


@pytest.mark.parametrize("changed, named", [
    (with_settings(lr=3e-4, threads=2), "settings.lr: 0.001 -> 0.0003"),
    (with_settings(batch_size=64), "settings.batch_size: 32 -> 64"),
    ({**INPUTS, "data": {"tokens": 11}}, "data.tokens: 10 -> 11"),
    ({**INPUTS, "run": {"objective": "mlm", "knobs": {"mask_ratio": 0.3}}},
     "run.knobs: '<unset>' -> {'mask_ratio': 0.3}"),
])
def test_a_result_changing_setting_is_refused_by_name(changed, named):
    with pytest.raises(StaleCheckpoint) as refused:
        check_resumable(saved(), changed, PRETRAIN_OPERATIONAL, "checkpoint x", "use --fresh.")
    message = str(refused.value)
    assert named in message and message.endswith("use --fresh.") and "threads" not in message


def test_a_checkpoint_without_recorded_settings_resumes_only_unchanged():
    old = {"fingerprint": params_hash(INPUTS)}  # what checkpoints held before settings were recorded
    assert check_resumable(old, INPUTS, PRETRAIN_OPERATIONAL, "ckpt", "") == []
    with pytest.raises(StaleCheckpoint, match="earlier maskbench"):
        check_resumable(old, with_settings(threads=2), PRETRAIN_OPERATIONAL, "ckpt", "")
