"""Run the alignment kernels (dag.cu) on CUDA tensors through CuPy.

The kernel is dag.cu plus the shared arithmetic in dag.cuh: `kernel_source()` pastes the header
in, so every compiler (CuPy here, NVRTC in the tests) sees one self-contained text and any cache
keyed on that text notices a change to either file. CuPy compiles it once per device with NVRTC
and caches the binary on disk (~/.cupy/kernel_cache, keyed by the source text); torch tensors
are handed to the kernels through DLPack without copies, and the kernels run on torch's current
stream. The maths lives in dag.cuh, tested on the CPU through its host twin
(tests/align_support/host.py); this file only allocates and launches.

Inputs and gradients are float32 here (inputs of other dtypes are cast, log Z and gradients
cast back); the DP tables and log Z are float64 (see dag.cuh for why).
Install with `pip install 'maskbench[gpu-cu12]'` or `'maskbench[gpu-cu13]'` (CuPy for CUDA 12 or 13).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
INCLUDE_LINE = '#include "dag.cuh"'
TRANSITION_BLOCK = 128


def header_source() -> str:
    return (HERE / "dag.cuh").read_text()


def kernel_source() -> str:
    source = (HERE / "dag.cu").read_text()
    if INCLUDE_LINE not in source:
        raise RuntimeError(f"dag.cu no longer contains {INCLUDE_LINE!r}; update kernel_source in cuda.py")
    return source.replace(INCLUDE_LINE, header_source())


def unavailable_reason() -> str | None:
    """Why the kernel cannot run here (CuPy missing, or present without a driver or a device),
    or None when CuPy imports and sees a CUDA device."""
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # ImportError, or CuPy present but no driver/device: both mean "no"
        return f"{type(exc).__name__}: {exc}"
    return None if count > 0 else "CuPy sees no CUDA device"


def available() -> bool:
    return unavailable_reason() is None


def install_hint() -> str:
    """The pip command that installs CuPy for the CUDA major version PyTorch was built for."""
    major = (torch.version.cuda or "").split(".")[0]
    if major in ("12", "13"):
        return f"pip install 'maskbench[gpu-cu{major}]'"
    return "pip install 'maskbench[gpu-cu12]' (CUDA 12) or 'maskbench[gpu-cu13]' (CUDA 13)"


@functools.lru_cache(maxsize=None)
def _module(device_index: int):
    import cupy
    with cupy.cuda.Device(device_index):
        return cupy.RawModule(code=kernel_source(), options=("--std=c++17",))


def _launch(name, grid, block, *args):
    """Launch kernel `name` on the device and current torch stream of the first tensor arg.

    Tensors go to CuPy through DLPack, detached: torch refuses to export a tensor that requires
    grad, and some do here (log Z is the Function's output when no cast copies it, and backward
    gets it back from the saved tensors). A detached tensor shares the storage, so the kernels'
    writes land in the tensors passed in. Other arguments become the kernels' 32-bit `int`.
    """
    import cupy
    device = next(a for a in args if isinstance(a, torch.Tensor)).device
    stream = torch.cuda.current_stream(device).cuda_stream
    converted = [cupy.from_dlpack(a.detach()) if isinstance(a, torch.Tensor) else np.int32(a) for a in args]
    with cupy.cuda.Device(device.index), cupy.cuda.ExternalStream(stream):
        _module(device.index).get_function(name)(grid, block, tuple(converted))


def _threads(nodes: int) -> int:
    """One thread per node, in whole warps, at most a full block (threads then loop)."""
    return min(1024, max(32, -(-nodes // 32) * 32))


def _prepare(log_emit, log_trans, target_lengths, node_counts):
    as_float = lambda t: t.detach().to(torch.float32).contiguous()
    as_int = lambda t: t.to(device=log_emit.device, dtype=torch.int32).contiguous()
    return as_float(log_emit), as_float(log_trans), as_int(target_lengths), as_int(node_counts)


def forward(emit, trans, m, n):
    B, M, L = emit.shape
    alpha = torch.full((B, M + 2, L), float("-inf"), dtype=torch.float64, device=emit.device)
    log_z = torch.empty(B, dtype=torch.float64, device=emit.device)
    if B:
        _launch("dag_forward", (B,), (_threads(L),), emit, trans, m, n, M, L, alpha, log_z)
    return alpha, log_z


def backward(emit, trans, m, n, alpha, log_z, grad_z):
    B, M, L = emit.shape
    trans_t = trans.transpose(1, 2).contiguous()
    w = torch.full((B, M + 2, L), float("-inf"), dtype=torch.float64, device=emit.device)
    grad_emit = torch.zeros(B, M, L, dtype=torch.float32, device=emit.device)
    grad_trans = torch.empty(B, L, L, dtype=torch.float32, device=emit.device)
    if B:
        _launch("dag_backward", (B,), (_threads(L),), emit, trans, trans_t, m, n, M, L, alpha,
                log_z, grad_z, w, grad_emit)
        grid = (-(-L // TRANSITION_BLOCK), L, B)
        _launch("dag_transition_gradient", grid, (TRANSITION_BLOCK,), emit, trans, m, n, M, L,
                alpha, w, log_z, grad_z, grad_trans)
    return grad_emit, grad_trans


def forward_tables(log_emit, log_trans, target_lengths, node_counts):
    """The forward pass, as reference.forward_tables: (alpha (B, M+2, L), log Z (B,)), float64.
    Inputs already checked by maskbench.align.dag_loss."""
    return forward(*_prepare(log_emit, log_trans, target_lengths, node_counts))


def backward_gradients(log_emit, log_trans, target_lengths, node_counts, alpha, log_z, grad_z):
    """The backward pass, as reference.backward_gradients: gradients in the inputs' dtypes."""
    emit, trans, m, n = _prepare(log_emit, log_trans, target_lengths, node_counts)
    grad_z = grad_z.detach().to(torch.float32).contiguous()
    grad_emit, grad_trans = backward(emit, trans, m, n, alpha, log_z, grad_z)
    return grad_emit.to(log_emit.dtype), grad_trans.to(log_trans.dtype)


@torch.no_grad()
def dag_best_path(log_emit, log_trans, target_lengths, node_counts):
    emit, trans, m, n = _prepare(log_emit, log_trans, target_lengths, node_counts)
    B, M, L = emit.shape
    table = torch.full((B, M + 2, L), float("-inf"), dtype=torch.float64, device=emit.device)
    back = torch.full((B, M + 2, L), -1, dtype=torch.int32, device=emit.device)
    path = torch.full((B, M), -1, dtype=torch.int32, device=emit.device)
    score = torch.empty(B, dtype=torch.float64, device=emit.device)
    if B:
        _launch("dag_best_path", (B,), (_threads(L),), emit, trans, m, n, M, L, table, back, path,
                score)
    return score.to(log_emit.dtype), path.long()
