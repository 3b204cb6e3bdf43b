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
// The split recursions (dag_split_forward, dag_split_backward; see dag.cuh) run `ctas` blocks
// per sequence over a grid of B * ctas blocks and take two more int32 buffers, zeroed before
// each launch: progress (B, ctas), each segment's finished steps, and the ticket counter. Their
// tables' scales are (B, M+2, ctas), one per step and segment; their shared memory is
// split_scratch_floats(L, nodes, ctas, slab) floats. They launch up to 1,024 threads, so they
// are compiled for that (__launch_bounds__: at most 64 registers a thread; unbounded they took
// 68-80 on sm_80 and sm_90, and a 1,024-thread launch would have failed).

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

// The split recursions' block: WarpTeam plus what blocks of one sequence need to share a
// pass through global memory. Another block's writes are read from L2 (__ldcg: this SM's L1
// may hold a stale copy); a block announces a finished step after a fence that orders all its
// threads' writes before the count (publish), and a waiting block's threads poll the counts
// it needs, one thread a count, then fence before reading what they guard (wait).
struct SplitTeam : WarpTeam {
    __device__ float load(const float* p) const { return __ldcg(p); }
    __device__ double load(const double* p) const { return __ldcg(p); }
    __device__ void wait(const int* progress, int lo, int hi, int count) const {
        for (int k = lo + thread; k < hi; k += threads) {
            while (*(volatile const int*)(progress + k) < count) __nanosleep(64);
        }
        __threadfence();
        __syncthreads();
    }
    __device__ void publish(int* progress, int count) const {
        __threadfence();
        __syncthreads();
        if (thread == 0) atomicExch(progress, count);
    }
};

// This block's ticket, drawn when it starts: tickets count the blocks in the order they got
// an SM, so a block only ever waits on blocks that are already running (see dag.cuh).
__device__ int draw_ticket(int* ticket) {
    __shared__ int drawn;
    if (threadIdx.x == 0) drawn = atomicAdd(ticket, 1);
    __syncthreads();
    return drawn;
}

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

extern "C" __global__ void __launch_bounds__(1024)
dag_split_forward(const float* emit, const float* trans_t, const int* target_lengths, const int* node_counts, int B,
                  int M, int L, int ctas, int nodes, int slab, float* alpha, double* scale, double* log_z,
                  int* progress, int* ticket) {
    extern __shared__ float scratch[];
    const int t = draw_ticket(ticket);
    const dag::Assignment a = dag::forward_assignment(t, B);
    const dag::Sequence s = dag::sequence(emit, nullptr, trans_t, target_lengths, node_counts, a.b, M, L);
    dag::forward_segment(s, dag::Segment(a.seg, nodes, ctas, s.n), alpha + (long long)a.b * (M + 2) * L,
                         scale + (long long)a.b * (M + 2) * ctas, log_z + a.b, progress + (long long)a.b * ctas,
                         dag::SplitScratch(scratch, L, nodes, ctas, slab), SplitTeam());
}

extern "C" __global__ void __launch_bounds__(1024)
dag_split_backward(const float* emit, const float* trans, const int* target_lengths, const int* node_counts, int B,
                   int M, int L, int ctas, int nodes, int slab, const double* alpha, const double* log_z,
                   const float* grad_z, float* w, double* w_scale, float* grad_emit, int* progress, int* ticket) {
    extern __shared__ float scratch[];
    const int t = draw_ticket(ticket);
    const dag::Assignment a = dag::backward_assignment(t, B, ctas);
    const dag::Sequence s = dag::sequence(emit, trans, nullptr, target_lengths, node_counts, a.b, M, L);
    const long long table = (long long)a.b * (M + 2) * L;
    dag::backward_segment(s, dag::Segment(a.seg, nodes, ctas, s.n), alpha + table, log_z[a.b], grad_z[a.b], w + table,
                          w_scale + (long long)a.b * (M + 2) * ctas, grad_emit + (long long)a.b * M * L,
                          progress + (long long)a.b * ctas, dag::SplitScratch(scratch, L, nodes, ctas, slab),
                          SplitTeam());
}
