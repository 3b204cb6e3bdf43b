// States-alignment DP over a DAG: the arithmetic shared by the CUDA kernels (dag.cu) and the
// CPU build that tests them (tests/align_support/host.py). Every function here is
// __host__ __device__, and the per-sequence routines take (tid, nthreads, sync): a CUDA block
// runs them with its threads and __syncthreads(), the CPU runs the very same code with one
// "thread" and no barrier.
//
// Conventions (see reference.py for the maths): one sequence has m targets and n real nodes
// (L is the padded node count, the row stride). Node 0 is the start, node n-1 the end; targets
// are emitted by nodes 1..n-2. Step i = 1..m emits y_i; step m+1 "emits" the end node with
// log-probability 0, so that alpha[m+1][n-1] = log Z. All tables are (m+2) x L, row i = step i,
// in natural-log space.
//
// Precision. Inputs (emissions, transitions) and gradients are float32; the tables, log Z and
// every sum are float64. A float32 table is what failed at long rows: log Z reaches thousands of
// nats at L ~ 1,000 (-3,600 at (M, L) = (300, 1100)), where a float32 ulp is 2.4e-4, so
// exp(alpha + beta - log Z) carried relative errors of a few 1e-4 and posteriors near 1 missed
// the reference by 2-4e-4. Exponentials are still float32 (expf), but only of max-shifted
// differences taken in float64: their arguments are small and exact to a float32 rounding, so each
// term has a relative error of ~1e-7, and sums of positive terms in float64 keep that relative
// error whatever their length. Only a rescale by a new running maximum, which multiplies the
// whole partial sum, uses the float64 exp: a float32 factor could compound its error once per
// rescale, up to L times.

#ifndef MASKBENCH_ALIGN_DAG_CUH
#define MASKBENCH_ALIGN_DAG_CUH

#if defined(__CUDACC__)
#define DAG_HD __host__ __device__
#else
#define DAG_HD
#endif

#if defined(__CUDACC_RTC__)
#define DAG_NEG_INF (-__int_as_float(0x7f800000))
#else
#include <math.h>
#define DAG_NEG_INF (-INFINITY)
#endif

namespace dag {

// One sequence of the batch: pointers into the padded tensors plus its real sizes.
struct Sequence {
    const float* emit;     // (M, L): emit[(i-1)*L + u] = log P_u(y_i)
    const float* trans;    // (L, L): trans[v*L + u] = log E[v, u]
    const float* trans_t;  // (L, L): the transpose, so the backward pass reads columns too
    int m;                 // number of real targets
    int n;                 // number of real nodes
    int L;                 // padded node count (row stride)

    // log-probability that node u emits at step i: targets at interior nodes, then the end.
    DAG_HD float emission(int i, int u) const {
        if (i <= m) return (u >= 1 && u <= n - 2) ? emit[(long long)(i - 1) * L + u] : DAG_NEG_INF;
        return (i == m + 1 && u == n - 1) ? 0.f : DAG_NEG_INF;
    }
};

DAG_HD inline Sequence sequence(const float* emit, const float* trans, const float* trans_t,
                                const int* target_lengths, const int* node_counts,
                                int b, int M, int L) {
    Sequence s;
    s.emit = emit + (long long)b * M * L;
    s.trans = trans + (long long)b * L * L;
    s.trans_t = trans_t ? trans_t + (long long)b * L * L : trans_t;
    s.m = target_lengths[b];
    s.n = node_counts[b];
    s.L = L;
    return s;
}

// exp(x) for x <= 0 given in float64: float32 work, relative error ~1e-7 (see the top).
DAG_HD inline double exp_shifted(double x) { return (double)expf((float)x); }

// Running log(sum(exp(x))) in one pass: rescale the sum whenever a new maximum arrives.
struct LogSumExp {
    double max;
    double sum;
    DAG_HD LogSumExp() : max(DAG_NEG_INF), sum(0.0) {}
    DAG_HD void add(double x) {
        if (x == DAG_NEG_INF) return;
        if (x <= max) {
            sum += exp_shifted(x - max);
        } else {
            sum = sum * exp(max - x) + 1.0;
            max = x;
        }
    }
    DAG_HD double value() const { return max == DAG_NEG_INF ? DAG_NEG_INF : max + log(sum); }
};

// Running maximum and the first index that reached it (ties keep the smaller index).
struct MaxArg {
    double max;
    int arg;
    DAG_HD MaxArg() : max(DAG_NEG_INF), arg(-1) {}
    DAG_HD void add(double x, int index) {
        if (x > max) {
            max = x;
            arg = index;
        }
    }
};

// log sum_{r in [lo, hi)} exp(vec[r] + mat[r*stride + col]): one column of a log-space
// vector-matrix product. Forward: vec = alpha_{i-1}, mat = trans, col = u, r over v < u.
// Backward: vec = w_{i+1}, mat = trans_t, col = v, r over v < u < n.
DAG_HD inline double column_logsumexp(const double* vec, const float* mat, int stride, int col,
                                      int lo, int hi) {
    LogSumExp acc;
    for (int r = lo; r < hi; ++r) acc.add(vec[r] + mat[(long long)r * stride + col]);
    return acc.value();
}

DAG_HD inline MaxArg column_argmax(const double* vec, const float* mat, int stride, int col,
                                   int lo, int hi) {
    MaxArg acc;
    for (int r = lo; r < hi; ++r) acc.add(vec[r] + mat[(long long)r * stride + col], r);
    return acc;
}

// exp(log_joint - log_z), and 0 (not NaN) for impossible events or impossible sequences.
DAG_HD inline double posterior(double log_joint, double log_z) {
    if (log_joint == DAG_NEG_INF || log_z == DAG_NEG_INF) return 0.0;
    return exp_shifted(log_joint - log_z);
}

// Forward pass: alpha[i][u] = log sum over paths from the start that emitted y_1..y_i, the
// last at u. Rows are written for steps 0..m+1 and real nodes u < n; the rest is left as is.
template <class Sync>
DAG_HD void forward_sequence(const Sequence& s, double* alpha, double* log_z, int tid,
                             int nthreads, Sync sync) {
    const int L = s.L;
    for (int u = tid; u < s.n; u += nthreads) alpha[u] = (u == 0) ? 0.0 : DAG_NEG_INF;
    sync();
    for (int i = 1; i <= s.m + 1; ++i) {
        const double* prev = alpha + (long long)(i - 1) * L;
        for (int u = tid; u < s.n; u += nthreads) {
            const float e = s.emission(i, u);
            alpha[(long long)i * L + u] =
                (e == DAG_NEG_INF) ? DAG_NEG_INF : column_logsumexp(prev, s.trans, L, u, 0, u) + e;
        }
        sync();
    }
    if (tid == 0) *log_z = alpha[(long long)(s.m + 1) * L + s.n - 1];
}

// Backward pass. beta_i(v) = log sum over ways to finish from node v after step i; the routine
// stores w[i][u] = emission(i, u) + beta_i(u) (what the step-i transition into u is worth)
// for steps 1..m+1, and writes the emission gradient grad_z * exp(alpha_i + beta_i - log Z).
template <class Sync>
DAG_HD void backward_sequence(const Sequence& s, const double* alpha, double log_z, float grad_z,
                              double* w, float* grad_emit, int tid, int nthreads, Sync sync) {
    const int L = s.L;
    const int last = s.m + 1;
    for (int u = tid; u < s.n; u += nthreads) w[(long long)last * L + u] = s.emission(last, u);
    sync();
    for (int i = s.m; i >= 1; --i) {
        const double* next = w + (long long)(i + 1) * L;
        for (int v = tid; v < s.n; v += nthreads) {
            const float e = s.emission(i, v);
            const double beta = (e == DAG_NEG_INF)
                                   ? DAG_NEG_INF
                                   : column_logsumexp(next, s.trans_t, L, v, v + 1, s.n);
            w[(long long)i * L + v] = e + beta;
            grad_emit[(long long)(i - 1) * L + v] =
                (float)(grad_z * posterior(alpha[(long long)i * L + v] + beta, log_z));
        }
        sync();
    }
}

// Gradient of log Z with respect to log E[v, u]: the expected number of times a path uses the
// edge, sum_i exp(alpha_{i-1}(v) + log E[v, u] + w_i(u) - log Z), times grad_z.
DAG_HD inline float transition_gradient(const Sequence& s, const double* alpha, const double* w,
                                        double log_z, float grad_z, int v, int u) {
    if (!(v < u && u < s.n)) return 0.f;
    const double t = s.trans[(long long)v * s.L + u];
    double sum = 0.0;
    for (int i = 1; i <= s.m + 1; ++i)
        sum += posterior(alpha[(long long)(i - 1) * s.L + v] + t + w[(long long)i * s.L + u], log_z);
    return (float)(grad_z * sum);
}

// Viterbi: the same recursion as forward_sequence with max for sum, keeping back-pointers,
// then a backtrace that writes the node emitting each target (path[i-1] for y_i).
template <class Sync>
DAG_HD void best_path_sequence(const Sequence& s, double* score_table, int* back, int* path,
                               double* score, int tid, int nthreads, Sync sync) {
    const int L = s.L;
    for (int u = tid; u < s.n; u += nthreads) {
        score_table[u] = (u == 0) ? 0.0 : DAG_NEG_INF;
        back[u] = -1;
    }
    sync();
    for (int i = 1; i <= s.m + 1; ++i) {
        const double* prev = score_table + (long long)(i - 1) * L;
        for (int u = tid; u < s.n; u += nthreads) {
            const float e = s.emission(i, u);
            MaxArg best;
            if (e != DAG_NEG_INF) best = column_argmax(prev, s.trans, L, u, 0, u);
            score_table[(long long)i * L + u] = (best.arg < 0) ? DAG_NEG_INF : best.max + e;
            back[(long long)i * L + u] = best.arg;
        }
        sync();
    }
    if (tid == 0) {
        *score = score_table[(long long)(s.m + 1) * L + s.n - 1];
        int node = s.n - 1;
        for (int i = s.m + 1; i >= 2; --i) {
            node = (node < 0) ? -1 : back[(long long)i * L + node];
            path[i - 2] = node;
        }
    }
}

}  // namespace dag

#endif  // MASKBENCH_ALIGN_DAG_CUH
