"""States alignment for ExLM: log-probability of the masked targets summed over every path through
the DAG of expanded states (ExLM App. H, I), and the single best path.

    log_z = dag_loss(log_emit, log_trans, target_lengths, node_counts)   # (B,)
    loss = -log_z.mean()

log_emit[b, i, u] = log P_u(y_{i+1}) is (B, M, L); log_trans[b, v, u] = log E[v, u] is (B, L, L).
Sequence b uses its first target_lengths[b] targets and first node_counts[b] nodes (defaults: all);
node 0 is the start, node node_counts[b] - 1 the end, and only edges v < u count. The exact
recursion and conventions are in reference.py.

A sequence with no path that emits all its targets (more targets than interior nodes, or missing
edges) gets log Z = -inf, hence an infinite loss, and zero gradient; dag_loss reports it with an
ImpossibleAlignmentWarning naming the batch indices. It is never silently zeroed: mask such
sequences out (torch.isfinite(log_z)) or give them more nodes.

Backends: "cuda" runs the CuPy kernel (dag.cu; CUDA tensors, `pip install maskbench[gpu]`),
"reference" the PyTorch implementation (any device), "auto" the kernel when the tensors are on a
CUDA device and CuPy works, else the reference. The `backend=` argument wins over the
MASKBENCH_ALIGN_BACKEND environment variable, which wins over "auto".
"""

import os
import warnings

import torch

from maskbench.align import cuda, reference
from maskbench.align.reference import check_inputs

BACKENDS = ("auto", "reference", "cuda")
ENV_VAR = "MASKBENCH_ALIGN_BACKEND"

__all__ = ["dag_loss", "dag_best_path", "ImpossibleAlignmentWarning", "BACKENDS"]


class ImpossibleAlignmentWarning(UserWarning):
    """Some sequences have no path through the DAG that emits all their targets."""


def resolve_backend(backend, device) -> str:
    """The backend to use: "reference" or "cuda" (raises if "cuda" is asked for but unusable)."""
    choice = backend if backend is not None else os.environ.get(ENV_VAR, "auto")
    if choice not in BACKENDS:
        source = "backend" if backend is not None else ENV_VAR
        raise ValueError(f"{source} must be one of {BACKENDS}, got {choice!r}")
    if choice == "auto":
        return "cuda" if device.type == "cuda" and cuda.available() else "reference"
    if choice == "cuda" and device.type != "cuda":
        raise ValueError(f"the cuda backend needs CUDA tensors, got tensors on {device}")
    if choice == "cuda" and not cuda.available():
        raise RuntimeError("the cuda backend needs CuPy and a CUDA device: pip install maskbench[gpu]")
    return choice


def dag_loss(log_emit, log_trans, target_lengths=None, node_counts=None, *, backend=None):
    """log Z (B,) of the targets over all DAG paths; differentiable in log_emit and log_trans."""
    target_lengths, node_counts = check_inputs(log_emit, log_trans, target_lengths, node_counts)
    if resolve_backend(backend, log_emit.device) == "cuda":
        log_z = cuda.dag_loss(log_emit, log_trans, target_lengths, node_counts)
    else:
        log_z = reference.DagLoss.apply(log_emit, log_trans, target_lengths, node_counts)
    impossible = torch.isneginf(log_z.detach())
    if impossible.any():
        indices = impossible.nonzero().flatten().tolist()
        warnings.warn(f"dag_loss: {len(indices)} of {len(log_z)} sequences have no path that emits "
                      f"all their targets (log Z = -inf), batch indices {indices}",
                      ImpossibleAlignmentWarning, stacklevel=2)
    return log_z


def dag_best_path(log_emit, log_trans, target_lengths=None, node_counts=None, *, backend=None):
    """(score (B,), path (B, M)): the best path's log-probability and the node emitting each
    target (-1 past target_lengths[b], and everywhere when there is no path)."""
    target_lengths, node_counts = check_inputs(log_emit, log_trans, target_lengths, node_counts)
    if resolve_backend(backend, log_emit.device) == "cuda":
        return cuda.dag_best_path(log_emit, log_trans, target_lengths, node_counts)
    return reference.dag_best_path(log_emit, log_trans, target_lengths, node_counts)
