"""PyTorch reference for the ExLM states-alignment DP (ExLM App. H, I; DA-Transformer's DAG loss).

The DAG has L nodes in topological order. Node 0 is the start and node n-1 the end (ExLM's
expanded BOS and EOS); neither emits. A path starts at node 0, moves strictly forward
(v -> u only for v < u), visits one interior node per target, emitting y_1..y_m in order, and
ends with an edge into node n-1:

    alpha_0 = one-hot(start)
    alpha_i(u) = logsumexp_{v<u}(alpha_{i-1}(v) + log E[v, u]) + log P_u(y_i),   i = 1..m
    log Z = logsumexp_u(alpha_m(u) + log E[u, end])

The official code instead treats BOS and EOS as targets emitted by the first and last node; its
log Z is this one plus log P_0(BOS) + log P_{n-1}(EOS), so the two differ by terms the caller
can add. Internally the final edge is step m+1 at which only the end node "emits", with log
probability 0, so alpha_{m+1}(end) = log Z and every step has the same form.

Edges are taken only where v < u < n: whatever log_trans holds elsewhere (the diagonal, the lower
triangle, padding) is ignored and gets zero gradient, as do the emissions of padded targets,
padded nodes and the start and end nodes.

Forward and backward are each one batched (B x L) by (L x L) product per step on shifted
probabilities (the scaled forward algorithm of HMMs): alpha_{i-1} is shifted by its maximum,
log E by its column (forward) or row (backward) maximum, and the logarithm is taken after the
product. That is BLAS work, where autograd through M logsumexps makes and keeps a B x L x L
tensor per step. The arithmetic is float64 whatever the input dtype. A shifted sum loses only
terms below ~e^-708 each, so a sum of at least TINY (~e^-668) has a relative error below
L * e^-40; an entry whose sum falls below TINY although it could have a path (finite emission,
enough nodes before it for alpha, after it for beta) is recomputed exactly in log space. That only happens when the
scores
of one step span ~700 nats (say, the best partial path sits at a dead end), so log Z = -inf
means that no path emits all targets (m > n - 2 or missing edges), never an underflow.
Whether an entry needs that is known only on the device, so each pass first runs every step
without looking (flagging, on the device, any entry it would redo) and asks once at the end:
one host sync per pass instead of one per step (~330 us each on a GPU); only the rare pass
that flagged something runs again, redoing entries step by step, with the same result.

The backward pass (App. I.2) runs the beta recursion and forms the posteriors:
    d log Z / d log P_u(y_i) = exp(alpha_i(u) + beta_i(u) - log Z)
    d log Z / d log E[v, u]  = sum_i exp(alpha_{i-1}(v) + log E[v, u] + w_i(u) - log Z)
with w_i(u) = log P_u(y_i) + beta_i(u); the edge sum over i is a single (L x M)(M x L) product,
so memory is O(B M L) besides the (B, L, L) gradient itself. Each step's outer product is
shifted by the maximum over the v that still reach the end, which keeps both factors in range
unless a step's scores span ~700 nats; every path has m + 1 edges, so the edge posteriors of a
sequence must sum to m + 1, and a sequence whose sum falls short (mass lost to overflow or
underflow) gets its edge posteriors summed exactly, one (L x L) term per step. Impossible
sequences get zero gradient; reporting them is the caller's job (see maskbench.align.dag_loss).
"""

import torch

NEG_INF = float("-inf")
TINY = 1e-290           # a shifted sum below this may have lost its terms to underflow
# How far edge posteriors may fall short of m + 1 by rounding alone, and the cap on the u-side
# factor's logarithm (e^cap times m + 1 terms stays finite), for the product's dtype: float64
# here, float32 in the CUDA backend's product (maskbench.align.cuda.transition_gradient).
EDGE_SUM_RTOL = {torch.float64: 1e-9, torch.float32: 1e-5}
FACTOR_LOG_CAP = {torch.float64: 700.0, torch.float32: 80.0}


def check_inputs(log_emit, log_trans, target_lengths=None, node_counts=None):
    """Raise a ValueError naming the bad argument; return (target_lengths, node_counts) as long
    tensors on log_emit's device, filling the defaults (all M targets, all L nodes)."""
    if not isinstance(log_emit, torch.Tensor) or log_emit.dim() != 3 or not log_emit.is_floating_point():
        raise ValueError(f"log_emit must be a floating tensor of shape (B, M, L), got {_describe(log_emit)}")
    B, M, L = log_emit.shape
    if not isinstance(log_trans, torch.Tensor) or tuple(log_trans.shape) != (B, L, L):
        raise ValueError(f"log_trans must have shape (B, L, L) = ({B}, {L}, {L}) to match log_emit "
                         f"(B, M, L) = ({B}, {M}, {L}), got {_describe(log_trans)}")
    if log_trans.dtype != log_emit.dtype or log_trans.device != log_emit.device:
        raise ValueError(f"log_trans must have log_emit's dtype and device ({log_emit.dtype}, "
                         f"{log_emit.device}), got ({log_trans.dtype}, {log_trans.device})")
    if L < 2:
        raise ValueError(f"the DAG needs at least a start and an end node, got L = {L}")
    target_lengths = _lengths("target_lengths", target_lengths, B, M, 0, M, log_emit.device)
    node_counts = _lengths("node_counts", node_counts, B, L, 2, L, log_emit.device)
    return target_lengths, node_counts


def _lengths(name, lengths, batch, default, low, high, device):
    if lengths is None:
        return torch.full((batch,), default, dtype=torch.long, device=device)
    lengths = torch.as_tensor(lengths, device=device)
    if lengths.shape != (batch,) or lengths.is_floating_point() or lengths.is_complex():
        raise ValueError(f"{name} must be an integer tensor of shape ({batch},), got {_describe(lengths)}")
    if batch and not torch.compiler.is_compiling() and (lengths.min() < low or lengths.max() > high):
        raise ValueError(f"{name} must lie in [{low}, {high}], got {lengths.tolist()}")
    return lengths.long()


def _describe(x):
    if isinstance(x, torch.Tensor):
        return f"{x.dtype} tensor of shape {tuple(x.shape)}"
    return type(x).__name__


def step_emissions(log_emit, target_lengths, node_counts):
    """(B, M+1, L) float64: entry [b, i-1, u] is what node u emits at step i (see module doc)."""
    B, M, L = log_emit.shape
    device = log_emit.device
    step = torch.arange(1, M + 2, device=device).view(1, M + 1, 1)
    node = torch.arange(L, device=device).view(1, 1, L)
    m = target_lengths.view(B, 1, 1)
    end = (node_counts - 1).view(B, 1, 1)
    padded = torch.cat([log_emit.double(), log_emit.new_zeros(B, 1, L, dtype=torch.float64)], dim=1)
    emits = (step <= m) & (node >= 1) & (node < end)
    out = torch.where(emits, padded, NEG_INF)
    return torch.where((step == m + 1) & (node == end), 0.0, out)


def forward_edges(log_trans, node_counts, dtype=torch.float64):
    """log_trans as `dtype` with -inf wherever the edge v -> u is not v < u < n."""
    L = log_trans.shape[-1]
    node = torch.arange(L, device=log_trans.device)
    edge = (node.view(1, L, 1) < node.view(1, 1, L)) & (node.view(1, 1, L) < node_counts.view(-1, 1, 1))
    return log_trans.to(dtype, copy=True).masked_fill_(~edge, NEG_INF)


def safe_max(x, dim):
    """Max over `dim` (kept), with 0 in place of -inf so that subtracting it never gives NaN."""
    peak = x.amax(dim=dim, keepdim=True)
    return torch.where(torch.isneginf(peak), 0.0, peak)


def forward_alpha(emissions, edges):
    """alpha (B, M+2, L) in log space, step 0 = one-hot start: the scaled forward algorithm."""
    alpha, underflowed = _forward_steps(emissions, edges, redo=False)
    if underflowed:                                             # the pass's one host sync
        alpha, _ = _forward_steps(emissions, edges, redo=True)
    return alpha


def _forward_steps(emissions, edges, redo):
    """(alpha, flag): flag is a device bool, whether some step had an entry to recompute; with
    `redo` those entries are recomputed as they come (a sync per step), else left as they are."""
    B, steps, L = emissions.shape
    column_shift = safe_max(edges, dim=1)                      # (B, 1, L)
    scaled_into = (edges - column_shift).exp_().transpose(1, 2).contiguous()  # [b, u, v]: row GEMV
    reachable = _after_enough_nodes(emissions)
    alpha = emissions.new_full((B, steps + 1, L), NEG_INF)
    alpha[:, 0, 0] = 0.0
    underflowed = torch.zeros((), dtype=torch.bool, device=emissions.device)
    for i in range(1, steps + 1):
        previous = alpha[:, i - 1]
        shift = safe_max(previous, dim=-1)                     # (B, 1)
        mass = torch.bmm(scaled_into, torch.exp(previous - shift).unsqueeze(2)).squeeze(2)
        into = torch.log(mass) + shift + column_shift.squeeze(1)
        underflowed |= _underflow(into, mass, reachable[:, i - 1], previous, lambda b, u: edges[b, :, u], redo)
        alpha[:, i] = into + emissions[:, i - 1]
    return alpha, underflowed


def _after_enough_nodes(emissions):
    """(B, M+1, L): where alpha may be finite, a finite emission at a node u >= step (the path
    to it has visited `step` nodes after the start). Elsewhere the shifted sum is exactly 0."""
    step = torch.arange(1, emissions.shape[1] + 1, device=emissions.device).view(1, -1, 1)
    node = torch.arange(emissions.shape[2], device=emissions.device).view(1, 1, -1)
    return torch.isfinite(emissions) & (node >= step)


def _before_enough_nodes(emissions, target_lengths, node_counts):
    """(B, M+1, L): where the recursion's beta may be finite, a target step (beta_{m+1} is 0 by
    definition) with a finite emission at a node v that has an interior node left for each
    remaining target (v <= n - 2 - (m - step)). Elsewhere the shifted sum is exactly 0."""
    step = torch.arange(1, emissions.shape[1] + 1, device=emissions.device).view(1, -1, 1)
    node = torch.arange(emissions.shape[2], device=emissions.device).view(1, 1, -1)
    m = target_lengths.view(-1, 1, 1)
    room = node_counts.view(-1, 1, 1) - 2 - m + step
    return torch.isfinite(emissions) & (step <= m) & (node <= room)


def _underflow(log_sum, mass, may_be_finite, vector, matrix_lines, redo):
    """Whether some entry of one step has a shifted sum below TINY (a device bool, no sync);
    with `redo`, those entries are recomputed in log space, in place.

    log_sum (B, L) = log sum_r exp(vector[b, r] + line[r]) where line = matrix_lines(b, j) is
    the (F, L) slice of the edge matrix that entry (b, j) sums over. Only entries that may be
    finite count: the others are exactly -inf, and there are many.
    """
    lost = may_be_finite & (mass < TINY)
    if redo and lost.any():
        b, j = lost.nonzero(as_tuple=True)
        log_sum[b, j] = torch.logsumexp(vector[b] + matrix_lines(b, j), dim=-1)
    return lost.any()


def read_log_z(alpha, target_lengths, node_counts):
    batch = torch.arange(alpha.shape[0], device=alpha.device)
    return alpha[batch, target_lengths + 1, node_counts - 1]


def backward_posteriors(emissions, edges, alpha, log_z, target_lengths, node_counts):
    """Gradients of log Z (float64): (d/d log_emit (B, M, L), d/d log_trans (B, L, L)).

    Sequences with log Z = -inf get zeros. Also returns w (B, M+2, L), w_i = emission_i + beta_i,
    which is what the CUDA kernel stores, so the tests can compare the two.
    """
    B, steps, L = emissions.shape
    possible = torch.isfinite(log_z)
    log_z = torch.where(possible, log_z, 0.0).view(B, 1)
    row_shift = safe_max(edges, dim=2)                         # (B, L, 1)
    scaled_edges = (edges - row_shift).exp_()
    can_finish = _before_enough_nodes(emissions, target_lengths, node_counts)
    steps_args = (emissions, edges, row_shift, scaled_edges, can_finish, alpha, log_z, target_lengths)
    w, grad_emit, underflowed = _backward_steps(*steps_args, redo=False)
    if underflowed:                                             # the pass's one host sync
        w, grad_emit, _ = _backward_steps(*steps_args, redo=True)
    grad_trans = transition_posteriors(alpha, w, edges, row_shift, scaled_edges, log_z, possible, target_lengths)
    zero = ~possible.view(B, 1, 1)
    return grad_emit.masked_fill(zero, 0.0), grad_trans, w


def transition_posteriors(alpha, w, edges, row_shift, scaled_edges, log_z, possible, target_lengths):
    """d log Z / d log_trans (B, L, L) in scaled_edges' dtype, zero for impossible sequences:
    edge_posteriors, and the exact sum (float64) for sequences whose posteriors lose mass.
    alpha, w, row_shift, log_z (B, 1) are float64; edges the masked log transitions."""
    grad_trans = edge_posteriors(alpha, w, row_shift, scaled_edges, log_z)
    short = possible & ~_sums_to_path_length(grad_trans, target_lengths)
    if short.any():                                             # the pass's one host sync
        exact = exact_edge_posteriors(alpha[short], w[short], edges[short].double(), log_z[short])
        grad_trans[short] = exact.to(grad_trans.dtype)
    return grad_trans.masked_fill(~possible.view(-1, 1, 1), 0.0)


def _backward_steps(emissions, edges, row_shift, scaled_edges, can_finish, alpha, log_z, target_lengths, redo):
    """(w, grad_emit, flag): the beta recursion, flagging or redoing underflow as _forward_steps."""
    B, steps, L = emissions.shape
    w = emissions.new_full((B, steps + 1, L), NEG_INF)
    grad_emit = emissions.new_zeros(B, steps - 1, L)
    beta = emissions.new_full((B, L), NEG_INF)
    underflowed = torch.zeros((), dtype=torch.bool, device=emissions.device)
    for i in range(steps, 0, -1):
        beta = torch.where((target_lengths + 1 == i).view(B, 1), 0.0, beta)
        w[:, i] = emissions[:, i - 1] + beta
        if i < steps:
            real = (i <= target_lengths).view(B, 1)
            grad_emit[:, i - 1] = torch.where(real, torch.exp(alpha[:, i] + beta - log_z), 0.0)
        if i > 1:
            following = w[:, i]
            shift = safe_max(following, dim=-1)                # (B, 1)
            mass = torch.bmm(scaled_edges, torch.exp(following - shift).unsqueeze(2)).squeeze(2)
            beta = torch.log(mass) + row_shift.squeeze(2) + shift
            underflowed |= _underflow(beta, mass, can_finish[:, i - 2], following, lambda b, v: edges[b, v, :],
                                      redo)
    return w, grad_emit, underflowed


def edge_posteriors(alpha, w, row_shift, scaled_edges, log_z):
    """Edge posteriors summed over steps as one (L x M+1)(M+1 x L) product per sequence, in
    scaled_edges' dtype (the factors are formed in float64, one value per node and step).

    Step i's term factors into exp(alpha_{i-1}(v) + row_shift(v) - s_i) on the v side, times
    exp(w_i(u) - log Z + s_i) on the u side, times scaled_edges. s_i is the v side's maximum
    over the v that can still reach the end (the others have no path to share the posterior
    with), and the u side only counts the u that a path reaches; so both factors stay in range
    unless one step's scores span ~700 nats (~80 in float32). The u side is capped
    (FACTOR_LOG_CAP) so that 0 * inf never makes a NaN: what the cap or underflow loses shows in
    the sum that the caller checks.
    """
    dtype = scaled_edges.dtype
    reaches_end = torch.isfinite(w[:, :-1])
    reaches_end[:, 0] = True                                    # the start: alpha_0 is one-hot
    left = torch.where(reaches_end, alpha[:, :-1] + row_shift.transpose(1, 2), NEG_INF)
    left_shift = safe_max(left, dim=-1)                        # (B, M+1, 1)
    right = torch.where(torch.isfinite(alpha[:, 1:]), w[:, 1:] - log_z.unsqueeze(2), NEG_INF)
    right = torch.exp((right + left_shift).clamp(max=FACTOR_LOG_CAP[dtype])).to(dtype)
    left = torch.exp(left - left_shift).to(dtype).transpose(1, 2)
    return torch.bmm(left, right).mul_(scaled_edges)


def _sums_to_path_length(grad_trans, target_lengths):
    """Every path has m + 1 edges, so exact edge posteriors sum to m + 1: True where they do."""
    expected = (target_lengths + 1).double()
    return (grad_trans.sum((1, 2), dtype=torch.float64) - expected).abs() <= EDGE_SUM_RTOL[grad_trans.dtype] * expected


def exact_edge_posteriors(alpha, w, edges, log_z):
    """The edge posteriors term by term in log space, one (B, L, L) tensor per step: the
    fallback for the rare sequences where the factored product loses mass."""
    total = torch.zeros_like(edges)
    for i in range(1, w.shape[1]):
        log_joint = alpha[:, i - 1].unsqueeze(2) + edges + w[:, i].unsqueeze(1)
        total += torch.exp(log_joint - log_z.unsqueeze(2))
    return total


def forward_tables(log_emit, log_trans, target_lengths, node_counts):
    """The forward pass: (alpha (B, M+2, L), log Z (B,)), both float64."""
    emissions = step_emissions(log_emit, target_lengths, node_counts)
    alpha = forward_alpha(emissions, forward_edges(log_trans, node_counts))
    return alpha, read_log_z(alpha, target_lengths, node_counts)


def backward_gradients(log_emit, log_trans, target_lengths, node_counts, alpha, log_z, grad_z):
    """The backward pass: grad_z (B,) times d log Z / d log_emit and d log_trans, in the
    inputs' dtypes, from forward_tables' alpha and log Z."""
    emissions = step_emissions(log_emit, target_lengths, node_counts)
    grad_emit, grad_trans, _ = backward_posteriors(
        emissions, forward_edges(log_trans, node_counts), alpha, log_z, target_lengths, node_counts)
    scale = grad_z.double().view(-1, 1, 1)
    return grad_emit.mul_(scale).to(log_emit.dtype), grad_trans.mul_(scale).to(log_trans.dtype)


def dag_loss_autograd(log_emit, log_trans, target_lengths=None, node_counts=None):
    """The same log Z as the textbook log-space DP, differentiated by autograd.

    One logsumexp over a (B, L, L) tensor per step, all kept for the backward pass: O(B M L^2)
    memory. The baseline of benchmarks/bench_align.py and a cross-check in the tests. Missing
    edges and emissions are -1e4 rather than -inf (a logsumexp over -inf alone has a NaN
    gradient), so it is only meaningful for sequences that have a path.
    """
    target_lengths, node_counts = check_inputs(log_emit, log_trans, target_lengths, node_counts)
    emissions = step_emissions(log_emit, target_lengths, node_counts).clamp(min=-1e4).to(log_emit.dtype)
    edges = forward_edges(log_trans, node_counts).clamp(min=-1e4).to(log_trans.dtype)
    B, steps, L = emissions.shape
    alpha = emissions.new_full((B, L), -1e4)
    alpha[:, 0] = 0.0
    history = [alpha]
    for i in range(steps):
        alpha = torch.logsumexp(alpha.unsqueeze(2) + edges, dim=1) + emissions[:, i]
        history.append(alpha)
    return read_log_z(torch.stack(history, dim=1), target_lengths, node_counts)


@torch.no_grad()
def dag_best_path(log_emit, log_trans, target_lengths=None, node_counts=None):
    """The most probable path (max-product DP and backtrace).

    Returns (score (B,), path (B, M) long): score is the path's total log-probability (its
    emissions and all its edges, -inf if there is no path), path[b, i] the node that emits
    y_{i+1}, -1 past target_lengths[b] and for impossible sequences. Ties go to the lower node.
    """
    target_lengths, node_counts = check_inputs(log_emit, log_trans, target_lengths, node_counts)
    emissions = step_emissions(log_emit, target_lengths, node_counts)
    edges = forward_edges(log_trans, node_counts)
    B, steps, L = emissions.shape
    table = emissions.new_full((B, steps + 1, L), NEG_INF)
    table[:, 0, 0] = 0.0
    back = torch.full((B, steps + 1, L), -1, dtype=torch.long, device=log_emit.device)
    for i in range(1, steps + 1):
        best, arg = (table[:, i - 1].unsqueeze(2) + edges).max(dim=1)
        table[:, i] = best + emissions[:, i - 1]
        back[:, i] = torch.where(torch.isneginf(table[:, i]), -1, arg)
    batch = torch.arange(B, device=log_emit.device)
    path = torch.full((B, steps - 1), -1, dtype=torch.long, device=log_emit.device)
    node = node_counts - 1
    for i in range(steps, 1, -1):  # the pointer of step i names the node that emitted y_{i-1}
        pointer = torch.where(node >= 0, back[batch, i, node.clamp(min=0)], -1)
        active = i <= target_lengths + 1
        node = torch.where(active, pointer, node)
        path[:, i - 2] = torch.where(active, node, -1)
    return read_log_z(table, target_lengths, node_counts).to(log_emit.dtype), path
