"""The CUDA kernel's arithmetic, compiled for the CPU so that CI can test it without a GPU.

HOST_SOURCE below is dag.cu's twin: one C function per kernel, with the kernel's name and
parameters after a leading B (the grid's last dimension, one sequence per block), running the
same dag.cuh routines for one sequence after another with a single "thread" and no barrier. The
tests compare these outputs with the PyTorch reference, and the CPU test of the launch path
(tests/test_align_launch.py) runs these functions where maskbench.align.cuda launches the
kernels; the kernels differ from this file only in how they map threads to work. Built once with
g++ (a few seconds) and cached, see build.py.

Inputs and outputs are torch tensors on the CPU, as in cuda.py: float32 inputs and gradients,
float64 tables and log Z, int32 lengths.
"""

import ctypes
import functools

import torch

from maskbench.align.cuda import header_source
from maskbench.align.reference import check_inputs
from tests.align_support.build import compile_shared_library

HOST_SOURCE = r"""
struct NoSync {
    void operator()() const {}
};

// One function per kernel of dag.cu, with the kernel's parameters after a leading B (the
// number of sequences, i.e. the grid's last dimension): the blocks run one after another.

extern "C" {

void dag_forward(int B, const float* emit, const float* trans, const int* target_lengths,
                 const int* node_counts, int M, int L, double* alpha, double* log_z) {
    for (int b = 0; b < B; ++b) {
        const dag::Sequence s = dag::sequence(emit, trans, nullptr, target_lengths, node_counts, b, M, L);
        dag::forward_sequence(s, alpha + (long long)b * (M + 2) * L, log_z + b, 0, 1, NoSync());
    }
}

void dag_backward(int B, const float* emit, const float* trans, const float* trans_t,
                  const int* target_lengths, const int* node_counts, int M, int L,
                  const double* alpha, const double* log_z, const float* grad_z, double* w,
                  float* grad_emit) {
    for (int b = 0; b < B; ++b) {
        const dag::Sequence s = dag::sequence(emit, trans, trans_t, target_lengths, node_counts, b, M, L);
        const long long table = (long long)b * (M + 2) * L;
        dag::backward_sequence(s, alpha + table, log_z[b], grad_z[b], w + table,
                               grad_emit + (long long)b * M * L, 0, 1, NoSync());
    }
}

void dag_transition_gradient(int B, const float* emit, const float* trans,
                             const int* target_lengths, const int* node_counts, int M, int L,
                             const double* alpha, const double* w, const double* log_z,
                             const float* grad_z, float* grad_trans) {
    for (int b = 0; b < B; ++b) {
        const dag::Sequence s = dag::sequence(emit, trans, nullptr, target_lengths, node_counts, b, M, L);
        const long long table = (long long)b * (M + 2) * L;
        for (int v = 0; v < L; ++v)
            for (int u = 0; u < L; ++u)
                grad_trans[((long long)b * L + v) * L + u] = dag::transition_gradient(
                    s, alpha + table, w + table, log_z[b], grad_z[b], v, u);
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
    return ctypes.CDLL(str(compile_shared_library(header_source() + HOST_SOURCE, "dag_host")))


def _ptr(tensor: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(tensor.data_ptr())


def _prepare(log_emit, log_trans, target_lengths, node_counts):
    """Validate, then convert to the kernel's layout: float32, int32, contiguous, on the CPU."""
    target_lengths, node_counts = check_inputs(log_emit, log_trans, target_lengths, node_counts)
    as_float = lambda t: t.detach().to("cpu", torch.float32).contiguous()
    as_int = lambda t: t.to("cpu", torch.int32).contiguous()
    return as_float(log_emit), as_float(log_trans), as_int(target_lengths), as_int(node_counts)


def forward(log_emit, log_trans, target_lengths=None, node_counts=None):
    """Return (alpha (B, M+2, L), log_z (B,)), as the dag_forward kernel computes them."""
    emit, trans, m, n = _prepare(log_emit, log_trans, target_lengths, node_counts)
    B, M, L = emit.shape
    alpha = torch.full((B, M + 2, L), float("-inf"), dtype=torch.float64)
    log_z = torch.empty(B, dtype=torch.float64)
    library().dag_forward(B, _ptr(emit), _ptr(trans), _ptr(m), _ptr(n), M, L, _ptr(alpha), _ptr(log_z))
    return alpha, log_z


def backward(log_emit, log_trans, target_lengths, node_counts, alpha, log_z, grad_z):
    """Return (w (B, M+2, L), grad_emit (B, M, L), grad_trans (B, L, L)) for upstream grad_z."""
    emit, trans, m, n = _prepare(log_emit, log_trans, target_lengths, node_counts)
    B, M, L = emit.shape
    trans_t = trans.transpose(1, 2).contiguous()
    grad_z = grad_z.to(torch.float32).contiguous()
    alpha, log_z = (t.to(torch.float64).contiguous() for t in (alpha, log_z))
    w = torch.full((B, M + 2, L), float("-inf"), dtype=torch.float64)
    grad_emit = torch.zeros(B, M, L, dtype=torch.float32)
    grad_trans = torch.zeros(B, L, L, dtype=torch.float32)
    library().dag_backward(B, _ptr(emit), _ptr(trans), _ptr(trans_t), _ptr(m), _ptr(n), M, L,
                           _ptr(alpha), _ptr(log_z), _ptr(grad_z), _ptr(w), _ptr(grad_emit))
    library().dag_transition_gradient(B, _ptr(emit), _ptr(trans), _ptr(m), _ptr(n), M, L,
                                      _ptr(alpha), _ptr(w), _ptr(log_z), _ptr(grad_z),
                                      _ptr(grad_trans))
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
