"""The optimiser and schedule (`maskbench.train.optim`): linear warmup, then polynomial decay to a
floor; no weight decay on biases and norms."""

from __future__ import annotations

import pytest
import torch

from maskbench.train.optim import build_optimizer, polynomial_schedule


def lrs(warmup, total, power, end_ratio):
    model = torch.nn.Linear(2, 2)
    opt = build_optimizer(model, lr=1.0, weight_decay=0.01)
    sched = polynomial_schedule(opt, warmup, total, power, end_ratio)
    out = []
    for _ in range(total):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out


def test_warmup_then_linear_decay():
    values = lrs(4, 12, 1.0, 0.0)
    assert values[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert values[4:] == pytest.approx([1 - i / 8 for i in range(8)])


def test_polynomial_power_and_floor():
    values = lrs(0, 10, 2.0, 0.1)
    assert values[5] == pytest.approx(0.1 + 0.9 * 0.5**2)


def test_no_weight_decay_on_biases_and_norms():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2))
    groups = build_optimizer(model, 1e-3, 0.1).param_groups
    assert [len(g["params"]) for g in groups] == [1, 3] and groups[1]["weight_decay"] == 0.0
