"""Run the alignment kernels (dag.cu) on CUDA tensors through CuPy.

The kernel is dag.cu plus the shared arithmetic in dag.cuh: `kernel_source()` pastes the header
in, so every compiler (CuPy here, NVRTC in the tests) sees one self-contained text and any cache
keyed on that text notices a change to either file. CuPy compiles it once per device with NVRTC
and caches the binary on disk (~/.cupy/kernel_cache, keyed by the source text); torch tensors
are handed to the kernels through DLPack without copies, and the kernels run on torch's current
stream. The maths lives in dag.cuh, tested on the CPU through its host twin
(tests/align_support/host.py); this file only allocates and launches.

Inputs, gradients and the kernels' tables are float32 here (inputs of other dtypes are cast,
log Z and gradients cast back), each table row an offset from one float64 scale per step; the
tables are handed on as float64 values, one per node and step (see dag.cuh for why). The
transitions' gradient is one batched float32 matrix product on those tables (IEEE float32:
TF32, which the trainer enables, would miss the tolerance), not a kernel.
Install with `pip install 'maskbench[gpu-cu12]'` or `'maskbench[gpu-cu13]'` (CuPy for CUDA 12 or 13).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path

import numpy as np
import torch

from maskbench.align import reference

HERE = Path(__file__).resolve().parent
INCLUDE_LINE = '#include "dag.cuh"'
WARP = 32                     # dag.cuh's WARP: the lanes that reduce one node
MAX_WARPS = 32                # a block of 1,024 threads
SHARED_BYTES_LIMIT = 48 * 1024  # dynamic shared memory a launch gets without opting in


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


def _launch(name, grid, block, *args, shared_mem=0):
    """Launch kernel `name` on the device and current torch stream of the first tensor arg.

    Tensors go to CuPy through DLPack, detached: torch refuses to export a tensor that requires
    grad, and some do here (log Z is the Function's output when no cast copies it, and backward
    gets it back from the saved tensors). A detached tensor shares the storage, so the kernels'
    writes land in the tensors passed in. Other arguments become the kernels' 32-bit `int`.
    A launch asking for more than the default 48 KB of dynamic shared memory (the split kernels'
    rows of the transitions) first raises the kernel's limit, as CUDA requires.
    """
    import cupy
    device = next(a for a in args if isinstance(a, torch.Tensor)).device
    stream = torch.cuda.current_stream(device).cuda_stream
    converted = [cupy.from_dlpack(a.detach()) if isinstance(a, torch.Tensor) else np.int32(a) for a in args]
    with cupy.cuda.Device(device.index), cupy.cuda.ExternalStream(stream):
        kernel = _module(device.index).get_function(name)
        if shared_mem > SHARED_BYTES_LIMIT:       # beyond the default: the kernel must opt in
            kernel.max_dynamic_shared_size_bytes = shared_mem
        kernel(grid, block, tuple(converted), shared_mem=shared_mem)


def _threads(nodes: int) -> int:
    """Viterbi's block: one thread per node, in whole warps, at most a full block (threads then loop)."""
    return min(1024, max(32, -(-nodes // 32) * 32))


def recursion_geometry(L: int) -> tuple[int, int]:
    """(threads, shared-memory bytes) of the forward and backward blocks: a warp per node, as
    many warps as nodes up to 32; two float rows of L nodes and one float per warp in shared
    memory. Raises for rows that do not fit a launch's default shared memory."""
    threads = WARP * min(MAX_WARPS, L)
    shared = 4 * (2 * L + threads // WARP)
    if shared > SHARED_BYTES_LIMIT:
        raise ValueError(f"the alignment kernel keeps two rows of L nodes in shared memory: L = {L} needs "
                         f"{shared} bytes, over the {SHARED_BYTES_LIMIT} a launch gets (L <= 6,128); use "
                         "`align: {backend: reference}`")
    return threads, shared


def _prepare(log_emit, log_trans, target_lengths, node_counts):
    as_float = lambda t: t.detach().to(torch.float32).contiguous()
    as_int = lambda t: t.to(device=log_emit.device, dtype=torch.int32).contiguous()
    return as_float(log_emit), as_float(log_trans), as_int(target_lengths), as_int(node_counts)


def _table(B, M, L, device):
    """A kernel table's offsets (B, M+2, L) float32 and scales (B, M+2) float64, all -inf."""
    return (torch.full((B, M + 2, L), float("-inf"), dtype=torch.float32, device=device),
            torch.full((B, M + 2), float("-inf"), dtype=torch.float64, device=device))


def _values(offsets, scales):
    """A table's float64 values: each row's scale plus its offsets (-inf stays -inf)."""
    return scales.unsqueeze(2) + offsets.double()


def forward(emit, trans, m, n):
    B, M, L = emit.shape
    offsets, scales = _table(B, M, L, emit.device)
    log_z = torch.empty(B, dtype=torch.float64, device=emit.device)
    if B:
        threads, shared = recursion_geometry(L)
        trans_t = trans.transpose(1, 2).contiguous()      # node u's predecessors in one row
        _launch("dag_forward", (B,), (threads,), emit, trans_t, m, n, M, L, offsets, scales, log_z,
                shared_mem=shared)
    return _values(offsets, scales), log_z


def backward(emit, trans, m, n, alpha, log_z, grad_z):
    """(w (B, M+2, L) float64, grad_emit, grad_trans), the gradients times grad_z."""
    B, M, L = emit.shape
    offsets, scales = _table(B, M, L, emit.device)
    grad_emit = torch.zeros(B, M, L, dtype=torch.float32, device=emit.device)
    if B:
        threads, shared = recursion_geometry(L)
        _launch("dag_backward", (B,), (threads,), emit, trans, m, n, M, L, alpha, log_z, grad_z, offsets,
                scales, grad_emit, shared_mem=shared)
    w = _values(offsets, scales)
    grad_trans = transition_gradient(trans, m, n, alpha, w, log_z).mul_(grad_z.view(B, 1, 1))
    return w, grad_emit, grad_trans


@contextlib.contextmanager
def _ieee_float32():
    """Float32 matrix products in full float32 (the trainer turns TF32 on: 10 bits of mantissa)."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def transition_gradient(trans, target_lengths, node_counts, alpha, w, log_z):
    """d log Z / d log_trans (B, L, L) float32 from the recursions' tables (float64 values):
    sum_i exp(alpha_{i-1}(v) + log E[v, u] + w_i(u) - log Z) as one float32 (L x M+1)(M+1 x L)
    product per sequence (reference.edge_posteriors), the per-node factors formed in float64 and
    the per-edge work in float32; a sequence whose posteriors lose mass (a step spanning more
    than ~80 nats) is summed exactly in float64 instead, as in the reference."""
    edges = reference.forward_edges(trans, node_counts, dtype=torch.float32)
    row_shift = reference.safe_max(edges, dim=2)
    scaled_edges = (edges - row_shift).exp_()
    possible = torch.isfinite(log_z)
    log_z = torch.where(possible, log_z, 0.0).view(-1, 1)
    with _ieee_float32():
        return reference.transition_posteriors(alpha, w, edges, row_shift.double(), scaled_edges, log_z, possible,
                                               target_lengths)


def kernel_tables(kernels, log_emit, log_trans, target_lengths, node_counts):
    """The forward pass through `kernels` (this module or maskbench.align.split: their `forward`),
    as reference.forward_tables: (alpha (B, M+2, L), log Z (B,)), float64. Inputs already checked
    by maskbench.align.dag_loss."""
    return kernels.forward(*_prepare(log_emit, log_trans, target_lengths, node_counts))


def kernel_gradients(kernels, log_emit, log_trans, target_lengths, node_counts, alpha, log_z, grad_z):
    """The backward pass through `kernels`' `backward`, as reference.backward_gradients: gradients
    in the inputs' dtypes."""
    emit, trans, m, n = _prepare(log_emit, log_trans, target_lengths, node_counts)
    grad_z = grad_z.detach().to(torch.float32).contiguous()
    _, grad_emit, grad_trans = kernels.backward(emit, trans, m, n, alpha.contiguous(), log_z.contiguous(), grad_z)
    return grad_emit.to(log_emit.dtype), grad_trans.to(log_trans.dtype)


forward_tables = functools.partial(kernel_tables, sys.modules[__name__])
backward_gradients = functools.partial(kernel_gradients, sys.modules[__name__])


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
