// CUDA kernels for the states-alignment DP. Each kernel only maps threads to work and calls the
// arithmetic in dag.cuh, which the CPU build (tests/align_support/host.py) runs and the tests
// check against the PyTorch reference. One block per sequence for the recursions (the steps are
// sequential and synchronise with __syncthreads); one thread per edge for the transition gradient.
// Tensors are contiguous: float32 emit (B, M, L), trans and trans_t (B, L, L) and the gradients;
// float64 alpha, w, score tables (B, M+2, L) and log Z, score (B,); int32 lengths, paths (B, M).

#include "dag.cuh"

struct BlockSync {
    __device__ void operator()() const { __syncthreads(); }
};

extern "C" __global__ void dag_forward(const float* emit, const float* trans,
                                       const int* target_lengths, const int* node_counts,
                                       int M, int L, double* alpha, double* log_z) {
    const int b = blockIdx.x;
    const dag::Sequence s = dag::sequence(emit, trans, nullptr, target_lengths, node_counts, b, M, L);
    dag::forward_sequence(s, alpha + (long long)b * (M + 2) * L, log_z + b, threadIdx.x,
                          blockDim.x, BlockSync());
}

extern "C" __global__ void dag_backward(const float* emit, const float* trans,
                                        const float* trans_t, const int* target_lengths,
                                        const int* node_counts, int M, int L,
                                        const double* alpha, const double* log_z,
                                        const float* grad_z, double* w, float* grad_emit) {
    const int b = blockIdx.x;
    const dag::Sequence s = dag::sequence(emit, trans, trans_t, target_lengths, node_counts, b, M, L);
    const long long table = (long long)b * (M + 2) * L;
    dag::backward_sequence(s, alpha + table, log_z[b], grad_z[b], w + table,
                           grad_emit + (long long)b * M * L, threadIdx.x, blockDim.x, BlockSync());
}

// Grid (ceil(L / blockDim.x), L, B): x covers the target node u, y the source node v.
extern "C" __global__ void dag_transition_gradient(const float* emit, const float* trans,
                                                   const int* target_lengths,
                                                   const int* node_counts, int M, int L,
                                                   const double* alpha, const double* w,
                                                   const double* log_z, const float* grad_z,
                                                   float* grad_trans) {
    const int b = blockIdx.z;
    const int v = blockIdx.y;
    const int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= L) return;
    const dag::Sequence s = dag::sequence(emit, trans, nullptr, target_lengths, node_counts, b, M, L);
    const long long table = (long long)b * (M + 2) * L;
    grad_trans[((long long)b * L + v) * L + u] =
        dag::transition_gradient(s, alpha + table, w + table, log_z[b], grad_z[b], v, u);
}

extern "C" __global__ void dag_best_path(const float* emit, const float* trans,
                                         const int* target_lengths, const int* node_counts,
                                         int M, int L, double* score_table, int* back, int* path,
                                         double* score) {
    const int b = blockIdx.x;
    const dag::Sequence s = dag::sequence(emit, trans, nullptr, target_lengths, node_counts, b, M, L);
    const long long table = (long long)b * (M + 2) * L;
    dag::best_path_sequence(s, score_table + table, back + table, path + (long long)b * M,
                            score + b, threadIdx.x, blockDim.x, BlockSync());
}
