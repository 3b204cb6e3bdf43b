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

Backends: "cuda" runs the CuPy kernel (dag.cu; CUDA tensors, `pip install maskbench[gpu-cu12]` or
`[gpu-cu13]`, see docs/profiles.md), "cuda_split" its variant with several blocks per sequence
(split.py; unmeasured, so "auto" never picks it yet), "reference" the PyTorch implementation
(any device), "auto" the
kernel on CUDA tensors where the recorded crossover (maskbench.alignment_record) says it is the
faster, and the reference elsewhere; while the crossover is unmeasured, that is the reference.
Where the record says the kernel, a CUDA device without a working CuPy stops "auto" with an error
naming the extra to install rather than falling back to the slower backend by accident.
The `backend=` argument wins over the process's setting, which the pipeline's stages take from
params.yaml's `align.backend` (`use_backend`); the backend each call runs is logged once (INFO)
and `backend_used()` says which one the last call ran, for the run's records.
"""

import logging
import warnings
from typing import Optional

import torch

from maskbench import alignment_record
from maskbench.align import cuda, reference, split
from maskbench.align.reference import check_inputs

KERNELS = dict(zip(alignment_record.KERNEL_BACKENDS, (cuda, split)))   # the backends that run a CuPy kernel
BACKENDS = ("auto", "reference", *KERNELS)
DESCRIPTIONS = {"cuda": "CUDA kernel (CuPy)", "cuda_split": "split CUDA kernel (CuPy)",
                "reference": "PyTorch reference"}

__all__ = ["dag_loss", "dag_best_path", "ImpossibleAlignmentWarning", "BACKENDS", "use_backend", "backend_used"]

log = logging.getLogger(__name__)
_setting = "auto"      # the process's backend when a call names none (use_backend)
_used: str | None = None
_announced: set[tuple[str, str]] = set()


class ImpossibleAlignmentWarning(UserWarning):
    """Some sequences have no path through the DAG that emits all their targets."""


def use_backend(choice: str) -> None:
    """Set the backend of every call that names none, for this process, and forget which one ran
    before (backend_used): a stage calls it once, with params.yaml's `align.backend`."""
    global _setting, _used
    if choice not in BACKENDS:
        raise ValueError(f"align.backend must be one of {BACKENDS}, got {choice!r}")
    _setting, _used = choice, None


def backend_used() -> str | None:
    """The backend the last alignment in this process ran ("cuda", "cuda_split" or "reference"); None if none ran."""
    return _used


def resolve_backend(backend, device, shape=(1, 1, 2)) -> str:
    """The backend to use for tensors of `shape` (B, M, L) on `device`: "reference" or a kernel,
    "cuda" or "cuda_split" (raises if the kernel is needed but unusable)."""
    choice = backend if backend is not None else _setting
    if choice not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {choice!r}")
    if choice == "auto":
        choice = "cuda" if device.type == "cuda" and alignment_record.kernel_pays(shape) else "reference"
    if choice in KERNELS and device.type != "cuda":
        raise ValueError(f"the {choice} backend needs CUDA tensors, got tensors on {device}")
    if choice in KERNELS:
        reason = cuda.unavailable_reason()
        if reason is not None:
            raise RuntimeError(
                f"ExLM's states alignment on {device} needs the CUDA kernel, and CuPy does not work here "
                f"({reason}): {cuda.install_hint()}. To run the PyTorch reference instead (float64 "
                "kernels per DP step, much slower), set `align: {backend: reference}` in params.yaml.")
    return choice


def _run_on(backend, log_emit) -> str:
    """resolve_backend, remembered for backend_used() and logged the first time it is chosen."""
    global _used
    device = log_emit.device
    _used = resolve_backend(backend, device, tuple(log_emit.shape))
    if (_used, device.type) not in _announced:
        _announced.add((_used, device.type))
        log.info("states alignment: %s on %s", DESCRIPTIONS[_used], device.type)
    return _used


def dag_loss(log_emit, log_trans, target_lengths=None, node_counts=None, *, backend=None):
    """log Z (B,) of the targets over all DAG paths; differentiable in log_emit and log_trans.

    The DP runs as two custom operators (maskbench::dag_forward, maskbench::dag_backward):
    torch.compile keeps them whole in its graph (`fullgraph=True` works around them) and runs
    them as they are, so the backend is chosen, and impossible sequences are reported, when
    they run. Under torch.compile the ranges of explicit target_lengths and node_counts are
    not checked (that would need a device sync); their shapes and dtypes are.
    """
    target_lengths, node_counts = check_inputs(log_emit, log_trans, target_lengths, node_counts)
    log_z, _ = torch.ops.maskbench.dag_forward(log_emit, log_trans, target_lengths, node_counts, backend)
    return log_z.to(log_emit.dtype)


def _implementation(backend, log_emit):
    return KERNELS.get(_run_on(backend, log_emit), reference)


@torch.library.custom_op("maskbench::dag_forward", mutates_args=())
def _dag_forward(log_emit: torch.Tensor, log_trans: torch.Tensor, target_lengths: torch.Tensor,
                 node_counts: torch.Tensor, backend: Optional[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(log Z (B,), alpha (B, M+2, L)), float64; alpha is kept for the backward pass."""
    implementation = _implementation(backend, log_emit)
    alpha, log_z = implementation.forward_tables(log_emit, log_trans, target_lengths, node_counts)
    impossible = torch.isneginf(log_z)
    if impossible.any():
        indices = impossible.nonzero().flatten().tolist()
        warnings.warn(f"dag_loss: {len(indices)} of {len(log_z)} sequences have no path that emits "
                      f"all their targets (log Z = -inf), batch indices {indices}",
                      ImpossibleAlignmentWarning, stacklevel=2)
    return log_z, alpha


@_dag_forward.register_fake
def _(log_emit, log_trans, target_lengths, node_counts, backend):
    B, M, L = log_emit.shape
    return (log_emit.new_empty(B, dtype=torch.float64), log_emit.new_empty(B, M + 2, L, dtype=torch.float64))


@torch.library.custom_op("maskbench::dag_backward", mutates_args=())
def _dag_backward(log_emit: torch.Tensor, log_trans: torch.Tensor, target_lengths: torch.Tensor,
                  node_counts: torch.Tensor, alpha: torch.Tensor, log_z: torch.Tensor, grad_z: torch.Tensor,
                  backend: Optional[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """grad_z times the gradients of log Z in log_emit and log_trans (their dtypes)."""
    implementation = _implementation(backend, log_emit)
    return implementation.backward_gradients(log_emit, log_trans, target_lengths, node_counts, alpha, log_z,
                                             grad_z)


@_dag_backward.register_fake
def _(log_emit, log_trans, target_lengths, node_counts, alpha, log_z, grad_z, backend):
    return torch.empty_like(log_emit), torch.empty_like(log_trans)


def _save_for_backward(ctx, inputs, output):
    log_emit, log_trans, target_lengths, node_counts, backend = inputs
    log_z, alpha = output
    ctx.save_for_backward(log_emit, log_trans, target_lengths, node_counts, alpha, log_z)
    ctx.backend = backend


def _backward(ctx, grad_log_z, grad_alpha):
    grad_emit, grad_trans = torch.ops.maskbench.dag_backward(*ctx.saved_tensors, grad_log_z, ctx.backend)
    return grad_emit, grad_trans, None, None, None


_dag_forward.register_autograd(_backward, setup_context=_save_for_backward)


def dag_best_path(log_emit, log_trans, target_lengths=None, node_counts=None, *, backend=None):
    """(score (B,), path (B, M)): the best path's log-probability and the node emitting each
    target (-1 past target_lengths[b], and everywhere when there is no path)."""
    target_lengths, node_counts = check_inputs(log_emit, log_trans, target_lengths, node_counts)
    return _implementation(backend, log_emit).dag_best_path(log_emit, log_trans, target_lengths, node_counts)
