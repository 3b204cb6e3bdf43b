"""The split alignment kernels (dag.cu's dag_split_forward and dag_split_backward): several
blocks per sequence, the backend `cuda_split` of maskbench.align.

The one-block kernels (cuda.py) give each sequence one block: at B = 64 that is 64 of an
H200's 132 SMs, and each block reduces every node of a step in turn. The split kernels give a
sequence `ctas` blocks of `nodes` nodes each, synchronised by per-sequence step counters in a
wavefront (no grid-wide barrier, no co-residency needed: see dag.cuh), each node still reduced
by a warp, and keep a block's rows of the transitions in shared memory when they fit. The
arithmetic is the one-block kernels' except for one float64 scale per step and segment instead
of per step, so the tables hand on the same float64 values and the transitions' gradient is
cuda.transition_gradient unchanged. `split_geometry` decides the launch from (B, L) and the
device's SM count and shared memory; tests/test_align_launch.py checks its contract.
"""

from __future__ import annotations

import dataclasses
import functools
import sys

import torch

from maskbench.align import cuda
from maskbench.align.cuda import MAX_WARPS, WARP, transition_gradient

BLOCKS_PER_SM = 2            # blocks the spread aims for on each SM: one runs while another waits
SHARED_OPTIN_BYTES = {8: 166_912, 9: 232_448}   # per block, opted in: sm_80 (163 KB), sm_90 (227 KB)
STATIC_SHARED_BYTES = 16     # dag.cu's draw_ticket keeps an int in static shared memory, which counts against the limit


@dataclasses.dataclass(frozen=True)
class SplitGeometry:
    ctas: int            # blocks per sequence (segments), each with nodes in it
    nodes: int           # nodes per block (the last block may have fewer)
    threads: int         # a warp per node, at most MAX_WARPS warps (warps then loop over nodes)
    slab: bool           # the block's rows of the transitions in shared memory
    shared_bytes: int    # dynamic shared memory: 4 * dag.cuh's split_scratch_floats

    def grid(self, B: int) -> int:
        return B * self.ctas


def scratch_floats(L: int, nodes: int, ctas: int, slab: bool) -> int:
    """dag.cuh's split_scratch_floats: row (L), raw (nodes), delta (ctas), warp maxima (WARP), slab."""
    return L + nodes + ctas + WARP + (nodes * L if slab else 0)


def _segments(L: int, ctas: int) -> tuple[int, int]:
    """(ctas, nodes) with no empty block: nodes = ceil(L / ctas), then as few blocks as cover L."""
    nodes = -(-L // ctas)
    return -(-L // nodes), nodes


def _largest_slab(L: int, shared_limit: int) -> int:
    """The most nodes a block may have with its slab in `shared_limit` bytes (0 if none fit)."""
    nodes = max(0, (shared_limit // 4 - L - WARP) // (L + 1))    # ignoring the deltas: an upper bound
    while nodes > 0 and 4 * scratch_floats(L, nodes, -(-L // nodes), True) > shared_limit:
        nodes -= 1
    return nodes


def split_geometry(B: int, L: int, sms: int, shared_limit: int) -> SplitGeometry:
    """The launch of the split recursions for B sequences of L nodes on a device with `sms` SMs
    and `shared_limit` bytes of shared memory per block (opted in).

    Spread first: enough blocks per sequence for BLOCKS_PER_SM blocks on every SM, each with at
    least a warp's worth of nodes (32). Then the slab: kept in shared memory where that spread
    leaves it room, or, where it does not, with as few more blocks per sequence as make it fit,
    provided every block of the grid is then resident at once (one per SM); otherwise each
    step streams the transitions from L2 as the one-block kernels do.
    """
    budget = shared_limit - STATIC_SHARED_BYTES                # what the dynamic scratch may take
    ctas, nodes = _segments(L, min(-(-BLOCKS_PER_SM * sms // max(B, 1)), -(-L // WARP)))
    slab = 4 * scratch_floats(L, nodes, ctas, True) <= budget
    fitting = _largest_slab(L, budget)
    if not slab and fitting >= WARP and B * _segments(L, -(-L // fitting))[0] <= sms:
        ctas, nodes = _segments(L, -(-L // fitting))
        slab = True
    shared = 4 * scratch_floats(L, nodes, ctas, slab)
    if shared > budget:
        raise ValueError(f"the split alignment kernel keeps a row of L nodes in shared memory: L = {L} needs "
                         f"{shared} bytes, over the {budget} a block gets here ({shared_limit} less "
                         f"{STATIC_SHARED_BYTES} static); use `align: {{backend: reference}}`")
    return SplitGeometry(ctas, nodes, WARP * min(MAX_WARPS, nodes), slab, shared)


@functools.lru_cache(maxsize=None)
def device_limits(index: int) -> tuple[int, int]:
    """(SM count, shared memory bytes per block opted in) of CUDA device `index`."""
    props = torch.cuda.get_device_properties(index)
    shared = getattr(props, "shared_memory_per_block_optin", None) or SHARED_OPTIN_BYTES.get(props.major,
                                                                                             cuda.SHARED_BYTES_LIMIT)
    return props.multi_processor_count, shared


def _geometry(B, L, device) -> SplitGeometry:
    return split_geometry(B, L, *device_limits(device.index if device.index is not None else 0))


def _table(B, M, L, ctas, device):
    """A split table's offsets (B, M+2, L) float32 and scales (B, M+2, ctas) float64, all -inf."""
    return (torch.full((B, M + 2, L), float("-inf"), dtype=torch.float32, device=device),
            torch.full((B, M + 2, ctas), float("-inf"), dtype=torch.float64, device=device))


def _values(offsets, scales, nodes):
    """A split table's float64 values: each node's segment's scale plus its offset."""
    L = offsets.shape[2]
    return scales.repeat_interleave(nodes, dim=2)[:, :, :L] + offsets.double()


def _counters(B, geometry, device):
    """(progress (B, ctas), ticket (1,)): int32 zeros, fresh for each launch."""
    counters = torch.zeros(B * geometry.ctas + 1, dtype=torch.int32, device=device)
    return counters[:-1], counters[-1:]


def forward(emit, trans, m, n):
    B, M, L = emit.shape
    g = _geometry(B, L, emit.device)
    offsets, scales = _table(B, M, L, g.ctas, emit.device)
    log_z = torch.empty(B, dtype=torch.float64, device=emit.device)
    if B:
        trans_t = trans.transpose(1, 2).contiguous()
        progress, ticket = _counters(B, g, emit.device)
        cuda._launch("dag_split_forward", (g.grid(B),), (g.threads,), emit, trans_t, m, n, B, M, L, g.ctas, g.nodes,
                     int(g.slab), offsets, scales, log_z, progress, ticket, shared_mem=g.shared_bytes)
    return _values(offsets, scales, g.nodes), log_z


def backward(emit, trans, m, n, alpha, log_z, grad_z):
    """(w (B, M+2, L) float64, grad_emit, grad_trans), the gradients times grad_z."""
    B, M, L = emit.shape
    g = _geometry(B, L, emit.device)
    offsets, scales = _table(B, M, L, g.ctas, emit.device)
    grad_emit = torch.zeros(B, M, L, dtype=torch.float32, device=emit.device)
    if B:
        progress, ticket = _counters(B, g, emit.device)
        cuda._launch("dag_split_backward", (g.grid(B),), (g.threads,), emit, trans, m, n, B, M, L, g.ctas, g.nodes,
                     int(g.slab), alpha, log_z, grad_z, offsets, scales, grad_emit, progress, ticket,
                     shared_mem=g.shared_bytes)
    w = _values(offsets, scales, g.nodes)
    grad_trans = transition_gradient(trans, m, n, alpha, w, log_z).mul_(grad_z.view(B, 1, 1))
    return w, grad_emit, grad_trans


# As cuda.forward_tables and cuda.backward_gradients, through the split kernels.
forward_tables = functools.partial(cuda.kernel_tables, sys.modules[__name__])
backward_gradients = functools.partial(cuda.kernel_gradients, sys.modules[__name__])


dag_best_path = cuda.dag_best_path       # Viterbi (analysis only) has no split kernel: the one-block one
