"""AdamW with the papers' settings and a warmup + polynomial-decay schedule (fairseq's
`polynomial_decay`, which ExLM and MAE-LM use)."""

from __future__ import annotations

import math

import torch


# which parameters weight decay shrinks: `matrices` = the weight matrices and embeddings (>= 2-D),
# not the biases and LayerNorm gains and shifts (BERT's and most current recipes' exclusion);
# `all` = every parameter, as fairseq's AdamW does (one group, `--weight-decay` on each), which
# MAE-LM's and ExLM's official code pretrain with
WEIGHT_DECAY_ON = ("matrices", "all")


def param_groups(model: torch.nn.Module, weight_decay: float, decay_on: str = "matrices") -> list[dict]:
    """The optimizer's groups: `weight_decay` on the parameters `decay_on` names, none on the
    rest (1-D tensors: biases and LayerNorm parameters, under `matrices`)."""
    if decay_on not in WEIGHT_DECAY_ON:
        raise ValueError(f"weight_decay_on={decay_on!r}; expected one of {', '.join(WEIGHT_DECAY_ON)}")
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if decay_on == "all" or p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model, lr: float, weight_decay: float, betas=(0.9, 0.98), eps: float = 1e-6,
                    decay_on: str = "matrices"):
    fused = {"fused": True} if next(model.parameters()).is_cuda else {}
    return torch.optim.AdamW(param_groups(model, weight_decay, decay_on), lr=lr, betas=tuple(betas), eps=eps, **fused)


def polynomial_schedule(optimizer, warmup_steps: int, total_steps: int, power: float = 1.0,
                        end_ratio: float = 0.0):
    """Linear warmup to the peak lr, then (1 - progress)^power decay to end_ratio · peak."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return end_ratio + (1.0 - end_ratio) * (1.0 - progress) ** power

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def optimizer_step(model: torch.nn.Module, optimizer, schedule, clip_norm: float | None) -> tuple[float, float]:
    """Clip the gradients (`clip_norm` null or 0: no clipping), step, clear them, advance the
    schedule; return the gradient norm before clipping and the learning rate the step used."""
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm or math.inf).item()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    lr = schedule.get_last_lr()[0]
    schedule.step()
    return grad_norm, lr
