// CUDA kernels for the states-alignment DP. Each kernel only maps threads to work and calls the
// arithmetic in dag.cuh, which the CPU build (tests/align_support/host.py) runs and the tests
// check against the PyTorch reference. The recursions run one block per sequence (the steps are
// sequential and synchronise with __syncthreads): a warp per node, its lanes over the node's
// predecessors, the step's rows in shared memory. The transitions' gradient is not a kernel: it
// is one batched float32 matrix product over the tables (cuda.py).
// Tensors are contiguous: float32 emit (B, M, L), trans and trans_t (B, L, L), the offset
// tables alpha and w (B, M+2, L) and the gradients; float64 scales (B, M+2), log Z (B,), the
// backward's alpha values (B, M+2, L) and Viterbi's tables; int32 lengths, paths (B, M).
// Dynamic shared memory: (2 L + warps) floats for the recursions.

#include "dag.cuh"

struct BlockSync {
    __device__ void operator()() const { __syncthreads(); }
};

// The block as dag.cuh's routines see it: warp w of `warps` takes nodes w, w + warps, ...;
// reduce() is called by all 32 lanes of a warp together and returns the merged sum to each.
struct WarpTeam {
    int warp, warps, lane, thread, threads;
    __device__ WarpTeam()
        : warp(threadIdx.x / dag::WARP), warps(blockDim.x / dag::WARP), lane(threadIdx.x % dag::WARP),
          thread(threadIdx.x), threads(blockDim.x) {}
    __device__ void sync() const { __syncthreads(); }
    __device__ dag::LogSumExp reduce(const float* vec, const float* row, int lo, int hi) const {
        dag::LogSumExp acc = dag::lane_share(vec, row, lo, hi, lane);
        for (int offset = dag::WARP / 2; offset > 0; offset /= 2) {
            dag::LogSumExp other;
            other.max = __shfl_xor_sync(0xffffffffu, acc.max, offset);
            other.sum = __shfl_xor_sync(0xffffffffu, acc.sum, offset);
            acc = dag::merge(acc, other);
        }
        return acc;
    }
};

extern "C" __global__ void dag_forward(const float* emit, const float* trans_t,
                                       const int* target_lengths, const int* node_counts,
                                       int M, int L, float* alpha, double* scale, double* log_z) {
    extern __shared__ float scratch[];  // prev (L), raw (L), warp_max (warps)
    const int b = blockIdx.x;
    const dag::Sequence s = dag::sequence(emit, nullptr, trans_t, target_lengths, node_counts, b, M, L);
    dag::forward_sequence(s, alpha + (long long)b * (M + 2) * L, scale + (long long)b * (M + 2), log_z + b,
                          scratch, scratch + L, scratch + 2 * L, WarpTeam());
}

extern "C" __global__ void dag_backward(const float* emit, const float* trans,
                                        const int* target_lengths, const int* node_counts,
                                        int M, int L, const double* alpha, const double* log_z,
                                        const float* grad_z, float* w, double* w_scale,
                                        float* grad_emit) {
    extern __shared__ float scratch[];  // next (L), raw (L), warp_max (warps)
    const int b = blockIdx.x;
    const dag::Sequence s = dag::sequence(emit, trans, nullptr, target_lengths, node_counts, b, M, L);
    const long long table = (long long)b * (M + 2) * L;
    dag::backward_sequence(s, alpha + table, log_z[b], grad_z[b], w + table, w_scale + (long long)b * (M + 2),
                           grad_emit + (long long)b * M * L, scratch, scratch + L, scratch + 2 * L, WarpTeam());
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
