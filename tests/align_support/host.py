"""The CUDA kernel's arithmetic, compiled for the CPU so that CI can test it without a GPU.

HOST_SOURCE below is dag.cu's twin: one C function per kernel, with the kernel's name and
parameters after a leading B (the grid's last dimension, one sequence per block), running the
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

from maskbench.align import cuda
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
    return ctypes.CDLL(str(compile_shared_library("#include <vector>\n" + header_source() + HOST_SOURCE, "dag_host")))


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
