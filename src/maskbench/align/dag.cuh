// States-alignment DP over a DAG: the arithmetic shared by the CUDA kernels (dag.cu) and the
// CPU build that tests them (tests/align_support/host.py). Every function here is
// __host__ __device__; the kernels map warps and lanes to it, the CPU twin runs the same
// functions lane by lane in the same order of reduction.
//
// Conventions (see reference.py for the maths): one sequence has m targets and n real nodes
// (L is the padded node count, the row stride). Node 0 is the start, node n-1 the end; targets
// are emitted by nodes 1..n-2. Step i = 1..m emits y_i; step m+1 "emits" the end node with
// log-probability 0, so that alpha[m+1][n-1] = log Z. All tables are (m+2) x L, row i = step i,
// in natural-log space.
//
// Work. A DP step is a masked log-space vector-matrix product: node u sums over its u
// predecessors (forward) or n-1-u successors (backward), up to L-1 terms. One warp reduces one
// node, its 32 lanes striding over the predecessors (coalesced reads of one row of the
// transitions, or of their transpose), each lane keeping a running float32 log-sum-exp that
// the warp then merges in a butterfly of shuffles: L/32 dependent terms per lane instead of L
// per thread.
//
// Precision. Everything per edge is float32. Each step's row is stored as a float32 offset
// from one float64 scale per step (scale_i = scale_{i-1} + the row's maximum): the offsets
// span only one step's spread of scores (tens of nats), where a float32 ulp is ~1e-6, while
// log Z reaches thousands of nats (-3,600 at (M, L) = (300, 1100)), where a float32 table
// failed (an ulp of 2.4e-4 made posteriors near 1 miss the reference by 2-4e-4). Only the
// scales and the per-node posteriors' constant (alpha's scale + w's scale - log Z, once per
// step) are float64.

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
    s.trans = trans ? trans + (long long)b * L * L : trans;
    s.trans_t = trans_t ? trans_t + (long long)b * L * L : trans_t;
    s.m = target_lengths[b];
    s.n = node_counts[b];
    s.L = L;
    return s;
}

constexpr int WARP = 32;  // lanes that share one node's reduction

// A running float32 log(sum(exp(x))): the sum is rescaled whenever a new maximum arrives. A
// lane sees at most L/32 terms, so even a rising sequence rescales a few dozen times (each
// rescale a float32 rounding, ~1e-7).
struct LogSumExp {
    float max;
    float sum;
    DAG_HD LogSumExp() : max(DAG_NEG_INF), sum(0.f) {}
    DAG_HD void add(float x) {
        if (x == DAG_NEG_INF) return;
        if (x <= max) {
            sum += expf(x - max);
        } else {
            sum = sum * expf(max - x) + 1.f;
            max = x;
        }
    }
    DAG_HD float value() const { return max == DAG_NEG_INF ? DAG_NEG_INF : max + logf(sum); }
};

// Two partial sums as one; symmetric to the bit (IEEE addition commutes), so every lane of a
// butterfly ends with the same value.
DAG_HD inline LogSumExp merge(const LogSumExp& a, const LogSumExp& b) {
    if (a.max == DAG_NEG_INF) return b;
    if (b.max == DAG_NEG_INF) return a;
    LogSumExp out;
    out.max = a.max > b.max ? a.max : b.max;
    out.sum = a.sum * expf(a.max - out.max) + b.sum * expf(b.max - out.max);
    return out;
}

// Lane `lane`'s share of log sum_{r in [lo, hi)} exp(vec[r] + row[r]): r = lo + lane + 32 k.
// Forward: vec = the previous step's offsets, row = column u of the transitions (a row of
// their transpose), r over v < u. Backward: vec = the next step's w offsets, row = row v of
// the transitions, r over v < u < n.
DAG_HD inline LogSumExp lane_share(const float* vec, const float* row, int lo, int hi, int lane) {
    LogSumExp acc;
    for (int r = lo + lane; r < hi; r += WARP) acc.add(vec[r] + row[r]);
    return acc;
}

// A step's raw value at a node, relative to the previous step's scale: the reduced sum plus
// the node's emission (-inf where it emits nothing, without reading the transitions).
DAG_HD inline float raw_value(float emission, const LogSumExp& reduced) {
    return emission == DAG_NEG_INF ? DAG_NEG_INF : reduced.value() + emission;
}

// A raw value as an offset from the step's maximum (-inf stays -inf, also when all are -inf).
DAG_HD inline float offset(float raw, float step_max) {
    return (raw == DAG_NEG_INF || step_max == DAG_NEG_INF) ? DAG_NEG_INF : raw - step_max;
}

// The next step's scale: the previous one plus the step's maximum (-inf once no path is left).
DAG_HD inline double next_scale(double scale, float step_max) {
    return step_max == DAG_NEG_INF ? (double)DAG_NEG_INF : scale + (double)step_max;
}

// The emission gradient at (step i, node v): grad_z * exp(alpha_i(v) + beta_i(v) - log Z), with
// alpha_i(v) + w's scale - log Z in float64 (one term per node) and beta's offset in float32;
// 0 (not NaN) for impossible events or sequences.
DAG_HD inline float emission_gradient(double alpha, double w_scale, float beta_offset, double log_z,
                                      float grad_z) {
    if (log_z == DAG_NEG_INF || alpha == DAG_NEG_INF || beta_offset == DAG_NEG_INF ||
        w_scale == DAG_NEG_INF)
        return 0.f;
    return grad_z * expf((float)(alpha + w_scale - log_z) + beta_offset);
}

// The step's maximum over the block: each warp's lane 0 posts the maximum of its nodes, and
// after the barrier every thread reads the posts (exact in any order).
template <class Team>
DAG_HD float step_max(float* warp_max, float mine, const Team& team) {
    if (team.lane == 0) warp_max[team.warp] = mine;
    team.sync();
    float best = DAG_NEG_INF;
    for (int k = 0; k < team.warps; ++k) best = warp_max[k] > best ? warp_max[k] : best;
    return best;
}

// Forward pass of one sequence. alpha (offsets, float32) and scale (float64) are its tables:
// alpha_i(u) = scale[i] + alpha[i][u], for steps 0..m+1 and real nodes u < n (the rest is left
// as is). `team` is the block: warps over nodes, lanes over predecessors (see Team in dag.cu).
// Scratch: prev and raw (L floats each) and warp_max (one float per warp), shared memory on
// the GPU.
template <class Team>
DAG_HD void forward_sequence(const Sequence& s, float* alpha, double* scale, double* log_z, float* prev,
                             float* raw, float* warp_max, const Team& team) {
    const int L = s.L;
    for (int u = team.thread; u < s.n; u += team.threads) prev[u] = alpha[u] = (u == 0) ? 0.f : DAG_NEG_INF;
    if (team.thread == 0) scale[0] = 0.0;
    team.sync();
    for (int i = 1; i <= s.m + 1; ++i) {
        float mine = DAG_NEG_INF;
        for (int u = team.warp; u < s.n; u += team.warps) {
            const float e = s.emission(i, u);
            LogSumExp into;
            if (e != DAG_NEG_INF) into = team.reduce(prev, s.trans_t + (long long)u * L, 0, u);
            const float value = raw_value(e, into);
            if (team.lane == 0) raw[u] = value;
            mine = value > mine ? value : mine;
        }
        const float best = step_max(warp_max, mine, team);
        for (int u = team.thread; u < s.n; u += team.threads)
            prev[u] = alpha[(long long)i * L + u] = offset(raw[u], best);
        if (team.thread == 0) scale[i] = next_scale(scale[i - 1], best);
        team.sync();
    }
    if (team.thread == 0) *log_z = scale[s.m + 1] + (double)alpha[(long long)(s.m + 1) * L + s.n - 1];
}

// Backward pass of one sequence. beta_i(v) = log sum over ways to finish from node v after
// step i; the routine stores w_i(v) = emission(i, v) + beta_i(v) as offsets w[i][v] from
// w_scale[i] for steps 1..m+1 (what the step-i transition into v is worth: the transitions'
// gradient is formed from it, see cuda.py), and writes the emission gradient
// grad_z * exp(alpha_i + beta_i - log Z). alpha is the forward's table as float64 values.
template <class Team>
DAG_HD void backward_sequence(const Sequence& s, const double* alpha, double log_z, float grad_z, float* w,
                              double* w_scale, float* grad_emit, float* next, float* raw, float* warp_max,
                              const Team& team) {
    const int L = s.L;
    const int last = s.m + 1;
    for (int u = team.thread; u < s.n; u += team.threads) next[u] = w[(long long)last * L + u] = s.emission(last, u);
    if (team.thread == 0) w_scale[last] = 0.0;
    team.sync();
    for (int i = s.m; i >= 1; --i) {
        float mine = DAG_NEG_INF;
        for (int v = team.warp; v < s.n; v += team.warps) {
            const float e = s.emission(i, v);
            LogSumExp out;
            if (e != DAG_NEG_INF) out = team.reduce(next, s.trans + (long long)v * L, v + 1, s.n);
            const float value = raw_value(e, out);
            if (team.lane == 0) {
                raw[v] = value;
                grad_emit[(long long)(i - 1) * L + v] =
                    emission_gradient(alpha[(long long)i * L + v], w_scale[i + 1], out.value(), log_z, grad_z);
            }
            mine = value > mine ? value : mine;
        }
        const float best = step_max(warp_max, mine, team);
        for (int v = team.thread; v < s.n; v += team.threads)
            next[v] = w[(long long)i * L + v] = offset(raw[v], best);
        if (team.thread == 0) w_scale[i] = next_scale(w_scale[i + 1], best);
        team.sync();
    }
}

// ---- The split recursions: several blocks per sequence --------------------------------------
//
// One block per sequence leaves most of a GPU idle at B = 64 and makes each block reduce all L
// nodes a step. The split kernels (dag.cu's dag_split_*) give a sequence `ctas` blocks, block
// `seg` owning the nodes [seg * nodes, (seg + 1) * nodes). Node u needs the previous step of
// its predecessors v < u only, so the forward pass is a wavefront: block seg runs step i once
// the blocks before it have finished step i - 1, each announcing its finished steps in a
// per-sequence counter (progress[seg]); no barrier spans the grid, and the earlier blocks run
// ahead. The backward pass is the mirror image (successors u > v: the blocks after it). A
// block takes its (sequence, segment) from a ticket drawn when it starts, segments in order,
// so it only ever waits on blocks that started before it: it cannot wait on a block that is
// not resident, whatever the occupancy (the design of DA-Transformer's DAG kernels).
//
// No block sees a whole step, so there is no step maximum to scale by: each (step, segment)
// keeps its own float64 scale (the maximum of its raw values), and a block reading the
// previous step re-bases the other segments' offsets onto the largest scale it reads (`ref`)
// with one float32 `delta` per segment: every value it reduces is <= 0, as in the one-block
// kernel, and the float64 work is one subtraction per segment and step. The block's nodes'
// rows of the transitions ("slab", nodes x L floats) are copied to shared memory once, when
// they fit, and read from there at every step.

// Floats of shared memory a split block uses: the previous step's row (L), its nodes' raw
// values (nodes), one delta per segment (ctas), one maximum per warp (WARP), and the slab.
DAG_HD inline long long split_scratch_floats(int L, int nodes, int ctas, int slab) {
    return (long long)L + nodes + ctas + WARP + (slab ? (long long)nodes * L : 0);
}

// The largest of the scales of segments [lo, hi) of one step (-inf if all are).
template <class Team>
DAG_HD double largest_scale(const double* scales, int lo, int hi, const Team& team) {
    double best = DAG_NEG_INF;
    for (int k = lo; k < hi; ++k) {
        const double x = team.load(scales + k);
        best = x > best ? x : best;
    }
    return best;
}

// Segment k's offsets re-based onto ref: scale_k - ref as a float, -inf where either is.
DAG_HD inline float rebase(double scale, double ref) {
    return (scale == DAG_NEG_INF || ref == DAG_NEG_INF) ? DAG_NEG_INF : (float)(scale - ref);
}

// Scratch of a split block, carved from shared memory as split_scratch_floats lays it out.
struct SplitScratch {
    float* row;       // L: the neighbouring step's offsets, re-based
    float* raw;       // nodes: this step's raw values of the block's nodes
    float* delta;     // ctas: each segment's re-basing
    float* warp_max;  // WARP
    float* slab;      // nodes x L, or null: the block's rows of the transitions
    DAG_HD SplitScratch(float* base, int L, int nodes, int ctas, int slab_on)
        : row(base), raw(base + L), delta(base + L + nodes), warp_max(base + L + nodes + ctas),
          slab(slab_on ? base + L + nodes + ctas + WARP : nullptr) {}
};

// The (sequence, segment) a split block's ticket t names, segments in wavefront order: every
// sequence's first segment, then every second one, ...; the backward pass's last segment first.
struct Assignment {
    int b, seg;
};
DAG_HD inline Assignment forward_assignment(int t, int B) { return {t % B, t / B}; }
DAG_HD inline Assignment backward_assignment(int t, int B, int ctas) { return {t % B, ctas - 1 - t / B}; }

// One block's nodes [first, end) of a sequence split into segments of `nodes`.
struct Segment {
    int seg, nodes, ctas, first, end;
    DAG_HD Segment(int seg_, int nodes_, int ctas_, int n)
        : seg(seg_), nodes(nodes_), ctas(ctas_), first(seg_ * nodes_),
          end(seg_ * nodes_ + nodes_ < n ? seg_ * nodes_ + nodes_ : n) {}
    DAG_HD bool empty() const { return first >= end; }
};

// Copy the block's rows of `matrix` (row r = node r, stride L) into the slab, columns [lo(u), hi(u)).
template <class Team, class Lo, class Hi>
DAG_HD void fill_slab(const Segment& g, const float* matrix, int L, float* slab, Lo lo, Hi hi,
                      const Team& team) {
    for (int u = g.first; u < g.end; ++u)
        for (int r = lo(u) + team.thread; r < hi(u); r += team.threads)
            slab[(long long)(u - g.first) * L + r] = matrix[(long long)u * L + r];
}

// Forward pass of one segment: as forward_sequence for the nodes [first, end), with scales
// (steps x ctas) per segment. Waits, before step i, for the segments before it to have
// finished step i - 1 (progress >= i), and announces each step it finishes.
template <class Team>
DAG_HD void forward_segment(const Sequence& s, const Segment& g, float* alpha, double* scale, double* log_z,
                            int* progress, const SplitScratch& x, const Team& team) {
    const int L = s.L, C = g.ctas;
    if (g.empty()) return;
    for (int u = g.first + team.thread; u < g.end; u += team.threads) alpha[u] = (u == 0) ? 0.f : DAG_NEG_INF;
    if (team.thread == 0) scale[g.seg] = (g.first == 0) ? 0.0 : (double)DAG_NEG_INF;
    if (x.slab) fill_slab(g, s.trans_t, L, x.slab, [](int) { return 0; }, [](int u) { return u; }, team);
    team.publish(progress + g.seg, 1);
    for (int i = 1; i <= s.m + 1; ++i) {
        team.wait(progress, 0, g.seg, i);
        const double* before = scale + (long long)(i - 1) * C;
        const double ref = largest_scale(before, 0, g.seg + 1, team);
        for (int k = team.thread; k <= g.seg; k += team.threads) x.delta[k] = rebase(team.load(before + k), ref);
        team.sync();
        const float* previous = alpha + (long long)(i - 1) * L;
        for (int v = team.thread; v < g.end; v += team.threads)
            x.row[v] = team.load(previous + v) + x.delta[v / g.nodes];
        team.sync();
        float mine = DAG_NEG_INF;
        for (int u = g.first + team.warp; u < g.end; u += team.warps) {
            const float e = s.emission(i, u);
            LogSumExp into;
            if (e != DAG_NEG_INF) {
                const float* column = x.slab ? x.slab + (long long)(u - g.first) * L : s.trans_t + (long long)u * L;
                into = team.reduce(x.row, column, 0, u);
            }
            const float value = raw_value(e, into);
            if (team.lane == 0) x.raw[u - g.first] = value;
            mine = value > mine ? value : mine;
        }
        const float best = step_max(x.warp_max, mine, team);
        for (int u = g.first + team.thread; u < g.end; u += team.threads)
            alpha[(long long)i * L + u] = offset(x.raw[u - g.first], best);
        if (team.thread == 0) scale[(long long)i * C + g.seg] = next_scale(ref, best);
        team.publish(progress + g.seg, i + 1);
    }
    const int end_node = s.n - 1;
    if (team.thread == 0 && g.first <= end_node && end_node < g.end)
        *log_z = scale[(long long)(s.m + 1) * C + g.seg] + (double)alpha[(long long)(s.m + 1) * L + end_node];
}

// Backward pass of one segment: as backward_sequence for the nodes [first, end), waiting for
// the segments after it (up to the last one with nodes) to have finished the step after.
// alpha holds the forward's float64 values; w and w_scale are per segment, as in the forward.
template <class Team>
DAG_HD void backward_segment(const Sequence& s, const Segment& g, const double* alpha, double log_z, float grad_z,
                             float* w, double* w_scale, float* grad_emit, int* progress, const SplitScratch& x,
                             const Team& team) {
    const int L = s.L, C = g.ctas, last = s.m + 1;
    const int used = (s.n + g.nodes - 1) / g.nodes;          // segments that have nodes
    if (g.empty()) return;
    for (int u = g.first + team.thread; u < g.end; u += team.threads) w[(long long)last * L + u] = s.emission(last, u);
    if (team.thread == 0) w_scale[(long long)last * C + g.seg] = (g.end == s.n) ? 0.0 : (double)DAG_NEG_INF;
    if (x.slab) fill_slab(g, s.trans, L, x.slab, [](int v) { return v + 1; }, [&s](int) { return s.n; }, team);
    team.publish(progress + g.seg, 1);
    for (int i = s.m; i >= 1; --i) {
        team.wait(progress, g.seg + 1, used, last - i);
        const double* after = w_scale + (long long)(i + 1) * C;
        const double ref = largest_scale(after, g.seg, used, team);
        for (int k = g.seg + team.thread; k < used; k += team.threads) x.delta[k] = rebase(team.load(after + k), ref);
        team.sync();
        const float* following = w + (long long)(i + 1) * L;
        for (int u = g.first + team.thread; u < s.n; u += team.threads)
            x.row[u] = team.load(following + u) + x.delta[u / g.nodes];
        team.sync();
        float mine = DAG_NEG_INF;
        for (int v = g.first + team.warp; v < g.end; v += team.warps) {
            const float e = s.emission(i, v);
            LogSumExp out;
            if (e != DAG_NEG_INF) {
                const float* row = x.slab ? x.slab + (long long)(v - g.first) * L : s.trans + (long long)v * L;
                out = team.reduce(x.row, row, v + 1, s.n);
            }
            const float value = raw_value(e, out);
            if (team.lane == 0) {
                x.raw[v - g.first] = value;
                grad_emit[(long long)(i - 1) * L + v] =
                    emission_gradient(alpha[(long long)i * L + v], ref, out.value(), log_z, grad_z);
            }
            mine = value > mine ? value : mine;
        }
        const float best = step_max(x.warp_max, mine, team);
        for (int v = g.first + team.thread; v < g.end; v += team.threads)
            w[(long long)i * L + v] = offset(x.raw[v - g.first], best);
        if (team.thread == 0) w_scale[(long long)i * C + g.seg] = next_scale(ref, best);
        team.publish(progress + g.seg, last - i + 1);
    }
}

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

// The best predecessor of node `col` (Viterbi): max over r in [lo, hi) of vec[r] + mat[r*stride + col].
DAG_HD inline MaxArg column_argmax(const double* vec, const float* mat, int stride, int col,
                                   int lo, int hi) {
    MaxArg acc;
    for (int r = lo; r < hi; ++r) acc.add(vec[r] + mat[(long long)r * stride + col], r);
    return acc;
}

// Viterbi (analysis only, not a training step): the forward recursion with max for sum in
// float64, one thread per node, keeping back-pointers, then a backtrace that writes the node
// emitting each target (path[i-1] for y_i).
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
