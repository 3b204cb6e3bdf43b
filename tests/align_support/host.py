"""The CUDA kernel's arithmetic, compiled for the CPU so that CI can test it without a GPU.

HOST_SOURCE below is dag.cu's twin: one C function per kernel, with the kernel's name and
parameters after a leading block count (the grid's last dimension: one sequence per block, or
B * ctas for the split kernels, whose blocks run in ticket order), running the
same dag.cuh routines for one sequence after another with one warp whose 32 lanes take turns
(SerialTeam: the same shares, merged in the same butterfly order as the shuffles) and no barrier. The
tests compare these outputs with the PyTorch reference, and the CPU test of the launch path
(tests/test_align_launch.py) runs these functions where maskbench.align.cuda launches the
kernels; the kernels differ from this file only in how they map threads to work. Built once with
g++ (a few seconds) and cached, see build.py.

Inputs and outputs are torch tensors on the CPU, as in cuda.py: float32 inputs and gradients,
float32 offset tables with float64 scales (handed on as float64 values), float64 log Z, int32
lengths.
"""

import ctypes
import functools

import torch

from maskbench.align import cuda, split
from maskbench.align.cuda import header_source
from maskbench.align.reference import check_inputs
from tests.align_support.build import compile_shared_library

HOST_SOURCE = r"""
struct NoSync {
    void operator()() const {}
};

// The block as the CPU runs it: one warp whose 32 lanes run one after another, merged in the
// butterfly order of dag.cu's shuffles (lane l takes lane l ^ offset, offsets 16, 8, 4, 2, 1).
struct SerialTeam {
    int warp = 0, warps = 1, lane = 0, thread = 0, threads = 1;
    void sync() const {}
    dag::LogSumExp reduce(const float* vec, const float* row, int lo, int hi) const {
        dag::LogSumExp lanes[dag::WARP], merged[dag::WARP];
        for (int l = 0; l < dag::WARP; ++l) lanes[l] = dag::lane_share(vec, row, lo, hi, l);
        for (int offset = dag::WARP / 2; offset > 0; offset /= 2) {
            for (int l = 0; l < dag::WARP; ++l) merged[l] = dag::merge(lanes[l], lanes[l ^ offset]);
            for (int l = 0; l < dag::WARP; ++l) lanes[l] = merged[l];
        }
        return lanes[0];
    }
};

// The split recursions' block as the CPU runs it: SerialTeam, plain loads, and a wait that
// cannot block. The twin runs the blocks one after another in ticket order, which is one
// schedule the GPU may take; a block that would wait on a count its predecessors have not yet
// published would wait on a block with a later ticket, which the GPU may never have started:
// the twin counts such waits (dag_split_stalls) instead of hanging.
static int split_stalls = 0;

struct SerialSplitTeam : SerialTeam {
    float load(const float* p) const { return *p; }
    double load(const double* p) const { return *p; }
    void wait(const int* progress, int lo, int hi, int count) const {
        for (int k = lo; k < hi; ++k) split_stalls += progress[k] < count;
    }
    void publish(int* progress, int count) const { *progress = count; }
};

// One function per kernel of dag.cu, with the kernel's parameters after a leading B (the
// number of sequences, i.e. the grid's last dimension): the blocks run one after another, each
// with its shared-memory scratch as a vector.

extern "C" {

void dag_forward(int B, const float* emit, const float* trans_t, const int* target_lengths,
                 const int* node_counts, int M, int L, float* alpha, double* scale, double* log_z) {
    std::vector<float> scratch(2 * L + 1);
    for (int b = 0; b < B; ++b) {
        const dag::Sequence s = dag::sequence(emit, nullptr, trans_t, target_lengths, node_counts, b, M, L);
        dag::forward_sequence(s, alpha + (long long)b * (M + 2) * L, scale + (long long)b * (M + 2), log_z + b,
                              scratch.data(), scratch.data() + L, scratch.data() + 2 * L, SerialTeam());
    }
}

void dag_backward(int B, const float* emit, const float* trans, const int* target_lengths,
                  const int* node_counts, int M, int L, const double* alpha, const double* log_z,
                  const float* grad_z, float* w, double* w_scale, float* grad_emit) {
    std::vector<float> scratch(2 * L + 1);
    for (int b = 0; b < B; ++b) {
        const dag::Sequence s = dag::sequence(emit, trans, nullptr, target_lengths, node_counts, b, M, L);
        const long long table = (long long)b * (M + 2) * L;
        dag::backward_sequence(s, alpha + table, log_z[b], grad_z[b], w + table, w_scale + (long long)b * (M + 2),
                               grad_emit + (long long)b * M * L, scratch.data(), scratch.data() + L,
                               scratch.data() + 2 * L, SerialTeam());
    }
}

// blocks = B * ctas, the grid; each draws its ticket as the kernel's blocks do.
void dag_split_forward(int blocks, const float* emit, const float* trans_t, const int* target_lengths,
                       const int* node_counts, int B, int M, int L, int ctas, int nodes, int slab, float* alpha,
                       double* scale, double* log_z, int* progress, int* ticket) {
    std::vector<float> scratch(dag::split_scratch_floats(L, nodes, ctas, slab));
    for (int block = 0; block < blocks; ++block) {
        const int t = (*ticket)++;
        const dag::Assignment a = dag::forward_assignment(t, B);
        const dag::Sequence s = dag::sequence(emit, nullptr, trans_t, target_lengths, node_counts, a.b, M, L);
        dag::forward_segment(s, dag::Segment(a.seg, nodes, ctas, s.n), alpha + (long long)a.b * (M + 2) * L,
                             scale + (long long)a.b * (M + 2) * ctas, log_z + a.b, progress + (long long)a.b * ctas,
                             dag::SplitScratch(scratch.data(), L, nodes, ctas, slab), SerialSplitTeam());
    }
}

void dag_split_backward(int blocks, const float* emit, const float* trans, const int* target_lengths,
                        const int* node_counts, int B, int M, int L, int ctas, int nodes, int slab,
                        const double* alpha, const double* log_z, const float* grad_z, float* w, double* w_scale,
                        float* grad_emit, int* progress, int* ticket) {
    std::vector<float> scratch(dag::split_scratch_floats(L, nodes, ctas, slab));
    for (int block = 0; block < blocks; ++block) {
        const int t = (*ticket)++;
        const dag::Assignment a = dag::backward_assignment(t, B, ctas);
        const dag::Sequence s = dag::sequence(emit, trans, nullptr, target_lengths, node_counts, a.b, M, L);
        const long long table = (long long)a.b * (M + 2) * L;
        dag::backward_segment(s, dag::Segment(a.seg, nodes, ctas, s.n), alpha + table, log_z[a.b], grad_z[a.b],
                              w + table, w_scale + (long long)a.b * (M + 2) * ctas, grad_emit + (long long)a.b * M * L,
                              progress + (long long)a.b * ctas, dag::SplitScratch(scratch.data(), L, nodes, ctas, slab),
                              SerialSplitTeam());
    }
}

int dag_split_stalls() { return split_stalls; }

long long dag_split_scratch_floats(int L, int nodes, int ctas, int slab) {
    return dag::split_scratch_floats(L, nodes, ctas, slab);
}

void dag_best_path(int B, const float* emit, const float* trans, const int* target_lengths,
                   const int* node_counts, int M, int L, double* score_table, int* back,
                   int* path, double* score) {
    for (int b = 0; b < B; ++b) {
        const dag::Sequence s = dag::sequence(emit, trans, nullptr, target_lengths, node_counts, b, M, L);
        const long long table = (long long)b * (M + 2) * L;
        dag::best_path_sequence(s, score_table + table, back + table, path + (long long)b * M,
                                score + b, 0, 1, NoSync());
    }
}

}
"""


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(compile_shared_library("#include <vector>\n" + header_source() + HOST_SOURCE, "dag_host")))
    lib.dag_split_scratch_floats.restype = ctypes.c_longlong
    return lib


def _ptr(tensor: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(tensor.data_ptr())


def _prepare(log_emit, log_trans, target_lengths, node_counts):
    """Validate, then convert to the kernel's layout: float32, int32, contiguous, on the CPU."""
    target_lengths, node_counts = check_inputs(log_emit, log_trans, target_lengths, node_counts)
    as_float = lambda t: t.detach().to("cpu", torch.float32).contiguous()
    as_int = lambda t: t.to("cpu", torch.int32).contiguous()
    return as_float(log_emit), as_float(log_trans), as_int(target_lengths), as_int(node_counts)


def forward(log_emit, log_trans, target_lengths=None, node_counts=None):
    """Return (alpha (B, M+2, L) float64 values, log_z (B,)), as cuda.forward hands them on."""
    emit, trans, m, n = _prepare(log_emit, log_trans, target_lengths, node_counts)
    B, M, L = emit.shape
    offsets, scales = cuda._table(B, M, L, "cpu")
    log_z = torch.empty(B, dtype=torch.float64)
    trans_t = trans.transpose(1, 2).contiguous()
    library().dag_forward(B, _ptr(emit), _ptr(trans_t), _ptr(m), _ptr(n), M, L, _ptr(offsets), _ptr(scales),
                          _ptr(log_z))
    return cuda._values(offsets, scales), log_z


def backward(log_emit, log_trans, target_lengths, node_counts, alpha, log_z, grad_z):
    """Return (w (B, M+2, L) float64 values, grad_emit (B, M, L), grad_trans (B, L, L)) for
    upstream grad_z, as cuda.backward: the kernel's twin, then the same transition gradient."""
    emit, trans, m, n = _prepare(log_emit, log_trans, target_lengths, node_counts)
    B, M, L = emit.shape
    grad_z = grad_z.to(torch.float32).contiguous()
    alpha, log_z = (t.to(torch.float64).contiguous() for t in (alpha, log_z))
    offsets, scales = cuda._table(B, M, L, "cpu")
    grad_emit = torch.zeros(B, M, L, dtype=torch.float32)
    library().dag_backward(B, _ptr(emit), _ptr(trans), _ptr(m), _ptr(n), M, L, _ptr(alpha), _ptr(log_z),
                           _ptr(grad_z), _ptr(offsets), _ptr(scales), _ptr(grad_emit))
    w = cuda._values(offsets, scales)
    grad_trans = cuda.transition_gradient(trans, m, n, alpha, w, log_z).mul_(grad_z.view(B, 1, 1))
    return w, grad_emit, grad_trans


def best_path(log_emit, log_trans, target_lengths=None, node_counts=None):
    """Return (score (B,), path (B, M) int64 with -1 padding), as the dag_best_path kernel does."""
    emit, trans, m, n = _prepare(log_emit, log_trans, target_lengths, node_counts)
    B, M, L = emit.shape
    table = torch.full((B, M + 2, L), float("-inf"), dtype=torch.float64)
    back = torch.full((B, M + 2, L), -1, dtype=torch.int32)
    path = torch.full((B, M), -1, dtype=torch.int32)
    score = torch.empty(B, dtype=torch.float64)
    library().dag_best_path(B, _ptr(emit), _ptr(trans), _ptr(m), _ptr(n), M, L, _ptr(table),
                            _ptr(back), _ptr(path), _ptr(score))
    return score, path.long()


def stalls() -> int:
    """How many times a split block of the twin would have waited on a later ticket (must stay 0)."""
    return library().dag_split_stalls()


def split_forward(log_emit, log_trans, target_lengths, node_counts, geometry):
    """As forward, through the split kernels' twin launched with `geometry` (split.SplitGeometry)."""
    emit, trans, m, n = _prepare(log_emit, log_trans, target_lengths, node_counts)
    B, M, L = emit.shape
    offsets, scales = split._table(B, M, L, geometry.ctas, "cpu")
    log_z = torch.empty(B, dtype=torch.float64)
    progress, ticket = split._counters(B, geometry, "cpu")
    trans_t = trans.transpose(1, 2).contiguous()                   # kept alive: _ptr holds no reference
    library().dag_split_forward(geometry.grid(B), _ptr(emit), _ptr(trans_t), _ptr(m),
                                _ptr(n), B, M, L, geometry.ctas, geometry.nodes, int(geometry.slab), _ptr(offsets),
                                _ptr(scales), _ptr(log_z), _ptr(progress), _ptr(ticket))
    return split._values(offsets, scales, geometry.nodes), log_z


def split_backward(log_emit, log_trans, target_lengths, node_counts, alpha, log_z, grad_z, geometry):
    """As backward, through the split kernels' twin launched with `geometry`."""
    emit, trans, m, n = _prepare(log_emit, log_trans, target_lengths, node_counts)
    B, M, L = emit.shape
    grad_z = grad_z.to(torch.float32).contiguous()
    alpha, log_z = (t.to(torch.float64).contiguous() for t in (alpha, log_z))
    offsets, scales = split._table(B, M, L, geometry.ctas, "cpu")
    grad_emit = torch.zeros(B, M, L, dtype=torch.float32)
    progress, ticket = split._counters(B, geometry, "cpu")
    library().dag_split_backward(geometry.grid(B), _ptr(emit), _ptr(trans), _ptr(m), _ptr(n), B, M, L, geometry.ctas,
                                 geometry.nodes, int(geometry.slab), _ptr(alpha), _ptr(log_z), _ptr(grad_z),
                                 _ptr(offsets), _ptr(scales), _ptr(grad_emit), _ptr(progress), _ptr(ticket))
    w = split._values(offsets, scales, geometry.nodes)
    grad_trans = cuda.transition_gradient(trans, m, n, alpha, w, log_z).mul_(grad_z.view(B, 1, 1))
    return w, grad_emit, grad_trans
