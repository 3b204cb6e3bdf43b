"""The PyTorch reference of the states-alignment DP against brute force, autograd and its own
invariants (maskbench.align.reference; the public dispatcher in maskbench.align)."""

import itertools
import math
import warnings

import pytest
import torch

import maskbench.align
import maskbench.alignment_record
from maskbench.align import (ImpossibleAlignmentWarning, cuda, dag_best_path, dag_loss, reference,
                             resolve_backend)
from tests.helpers import two_disjoint_routes


def reference_loss(*args):
    """log Z by the PyTorch reference, through the operators every objective calls; quiet about
    impossible sequences, which the arithmetic tests include on purpose (the warning has its own)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ImpossibleAlignmentWarning)
        return dag_loss(*args, backend="reference")


def random_dag(B, M, L, *, sparse=False, seed=0, dtype=torch.float64):
    """Normalised random emissions and transitions; `sparse` removes about half of the edges."""
    g = torch.Generator().manual_seed(seed)
    log_emit = torch.randn(B, M, L, generator=g, dtype=dtype).log_softmax(-1)
    log_trans = torch.randn(B, L, L, generator=g, dtype=dtype)
    if sparse:
        log_trans = log_trans.masked_fill(torch.rand(B, L, L, generator=g) < 0.5, float("-inf"))
    return log_emit, log_trans


def enumerate_paths(log_emit, log_trans, m, n):
    """Log-probability of every path of one sequence: start, m increasing interior nodes, end."""
    scores = []
    for nodes in itertools.combinations(range(1, n - 1), m):
        path = (0, *nodes, n - 1)
        score = sum(log_trans[v, u].item() for v, u in zip(path, path[1:]))
        score += sum(log_emit[i, u].item() for i, u in enumerate(nodes))
        scores.append(score)
    return torch.tensor(scores, dtype=torch.float64)


def brute_log_z(*args):
    scores = enumerate_paths(*args)
    return torch.logsumexp(scores, 0).item() if len(scores) else -math.inf


def brute_best(*args):
    scores = enumerate_paths(*args)
    return scores.max().item() if len(scores) else -math.inf


TINY = [(M, L) for M in range(5) for L in range(2, 10)]


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("M,L", TINY)
def test_log_z_equals_brute_force(M, L, sparse):
    log_emit, log_trans = random_dag(3, M, L, sparse=sparse, seed=10 * M + L)
    log_z = reference_loss(log_emit, log_trans)
    expected = [brute_log_z(log_emit[b], log_trans[b], M, L) for b in range(3)]
    torch.testing.assert_close(log_z, torch.tensor(expected, dtype=torch.float64))


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("M,L", TINY)
def test_best_path_equals_brute_force_max(M, L, sparse):
    log_emit, log_trans = random_dag(3, M, L, sparse=sparse, seed=10 * M + L)
    score, path = reference.dag_best_path(log_emit, log_trans)
    expected = [brute_best(log_emit[b], log_trans[b], M, L) for b in range(3)]
    torch.testing.assert_close(score, torch.tensor(expected, dtype=torch.float64))
    for b in range(3):
        if math.isinf(expected[b]):
            assert (path[b] == -1).all()
            continue
        nodes = [0, *path[b].tolist(), L - 1]
        assert nodes == sorted(set(nodes)) and all(1 <= u <= L - 2 for u in nodes[1:-1])
        own = sum(log_trans[b, v, u] for v, u in zip(nodes, nodes[1:]))
        own = own + sum(log_emit[b, i, u] for i, u in enumerate(nodes[1:-1]))
        torch.testing.assert_close(own, score[b])


def ragged_batch(seed=0, sparse=False):
    """Five sequences of different sizes padded to (M, L) = (5, 12), padding filled with junk."""
    m = torch.tensor([5, 3, 0, 2, 4])
    n = torch.tensor([12, 7, 2, 12, 9])
    log_emit, log_trans = random_dag(5, 5, 12, sparse=sparse, seed=seed)
    return log_emit, log_trans, m, n


def loss_and_grads(seed: int):
    """A ragged batch, its log Z and the gradients of their sum."""
    log_emit, log_trans, m, n = ragged_batch(seed=seed)
    log_emit.requires_grad_(True)
    log_trans.requires_grad_(True)
    log_z = reference_loss(log_emit, log_trans, m, n)
    grad_emit, grad_trans = torch.autograd.grad(log_z.sum(), [log_emit, log_trans])
    return log_emit, log_trans, m, n, log_z, grad_emit, grad_trans


def test_padding_does_not_change_anything():
    log_emit, log_trans, m, n, log_z, grad_emit, grad_trans = loss_and_grads(seed=1)
    for b in range(5):
        e = log_emit[b:b + 1, :m[b], :n[b]].detach().requires_grad_(True)
        t = log_trans[b:b + 1, :n[b], :n[b]].detach().requires_grad_(True)
        alone = reference_loss(e, t)
        torch.testing.assert_close(alone[0], log_z[b])
        ge, gt = torch.autograd.grad(alone.sum(), [e, t])
        torch.testing.assert_close(grad_emit[b, :m[b], :n[b]], ge[0])
        torch.testing.assert_close(grad_trans[b, :n[b], :n[b]], gt[0])
        assert grad_emit[b, m[b]:].abs().sum() == 0 and grad_emit[b, :, n[b]:].abs().sum() == 0
        assert grad_trans[b, n[b]:].abs().sum() == 0 and grad_trans[b, :, n[b]:].abs().sum() == 0
    torch.testing.assert_close(reference.dag_best_path(log_emit, log_trans, m, n)[0][1],
                               reference.dag_best_path(log_emit[1:2, :3, :7], log_trans[1:2, :7, :7])[0][0])


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_gradcheck_float64(sparse):
    log_emit, log_trans = random_dag(3, 4, 9, sparse=sparse, seed=6)
    m, n = torch.tensor([4, 2, 3]), torch.tensor([9, 6, 8])
    assert torch.isfinite(reference_loss(log_emit, log_trans, m, n)).all()  # finite differences need it
    inputs = (log_emit.requires_grad_(True), log_trans.requires_grad_(True))
    assert torch.autograd.gradcheck(lambda e, t: reference_loss(e, t, m, n), inputs)


def test_posteriors_sum_to_one_per_target_and_edges_to_path_length():
    log_emit, log_trans, m, n, log_z, grad_emit, grad_trans = loss_and_grads(seed=3)
    per_target = grad_emit.sum(-1)                               # (B, M)
    real = torch.arange(5).view(1, -1) < m.view(-1, 1)
    torch.testing.assert_close(per_target, real.double())
    torch.testing.assert_close(grad_trans.sum((1, 2)), (m + 1).double())  # every path has m+1 edges


def test_matches_autograd_through_logsumexp():
    log_emit, log_trans = random_dag(4, 9, 30, seed=4)
    m, n = torch.tensor([9, 4, 7, 1]), torch.tensor([30, 11, 25, 3])
    results = []
    for loss in (reference_loss, reference.dag_loss_autograd):
        e, t = log_emit.clone().requires_grad_(True), log_trans.clone().requires_grad_(True)
        log_z = loss(e, t, m, n)
        results.append((log_z, *torch.autograd.grad(log_z.sum(), [e, t])))
    for ours, theirs in zip(*results):
        torch.testing.assert_close(ours, theirs)


def test_large_magnitudes_stay_exact():
    """Log-probabilities in the hundreds: the scaled forward must neither underflow nor overflow."""
    log_emit, log_trans = random_dag(2, 4, 9, seed=5)
    log_emit, log_trans = 200 * log_emit, 150 * log_trans
    log_z = reference_loss(log_emit, log_trans)
    expected = [brute_log_z(log_emit[b], log_trans[b], 4, 9) for b in range(2)]
    torch.testing.assert_close(log_z, torch.tensor(expected, dtype=torch.float64))


def test_impossible_sequences_are_minus_inf_reported_and_nan_free():
    log_emit, log_trans = random_dag(3, 4, 8, seed=6)
    log_trans[2, :, 7] = float("-inf")                          # sequence 2: no edge into the end
    m, n = torch.tensor([4, 4, 2]), torch.tensor([8, 5, 8])     # sequence 1: 4 targets, 3 nodes
    e, t = log_emit.requires_grad_(True), log_trans.requires_grad_(True)
    with pytest.warns(ImpossibleAlignmentWarning, match=r"batch indices \[1, 2\]"):
        log_z = dag_loss(e, t, m, n, backend="reference")
    assert torch.isfinite(log_z[0]) and torch.isneginf(log_z[1:]).all()
    (-log_z).masked_fill(torch.isinf(log_z), 0).sum().backward()   # what a caller's mask does
    assert not e.grad.isnan().any() and not t.grad.isnan().any()
    assert e.grad[1:].abs().sum() == 0 and t.grad[1:].abs().sum() == 0
    score, path = dag_best_path(log_emit, log_trans, m, n, backend="reference")
    assert torch.isneginf(score[1:]).all() and (path[1:] == -1).all()


def test_gradient_of_impossible_sequence_itself_is_zero_not_nan():
    log_emit, log_trans = random_dag(1, 3, 4, seed=7)
    e, t = log_emit.requires_grad_(True), log_trans.requires_grad_(True)
    with pytest.warns(ImpossibleAlignmentWarning):
        log_z = dag_loss(e, t, backend="reference")
    log_z.sum().backward()
    assert (e.grad == 0).all() and (t.grad == 0).all()


def test_float32_in_float32_out():
    log_emit, log_trans = random_dag(2, 3, 7, seed=8, dtype=torch.float32)
    e, t = log_emit.requires_grad_(True), log_trans.requires_grad_(True)
    log_z = dag_loss(e, t, backend="reference")
    log_z.sum().backward()
    assert log_z.dtype == e.grad.dtype == t.grad.dtype == torch.float32
    expected = reference_loss(log_emit.double(), log_trans.double())
    torch.testing.assert_close(log_z.double(), expected, rtol=1e-6, atol=1e-6)


def test_no_warning_when_every_sequence_has_a_path():
    log_emit, log_trans, m, n = ragged_batch(seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dag_loss(log_emit, log_trans, m, n, backend="reference")


@pytest.mark.parametrize("call,message", [
    (lambda e, t: dag_loss(e[0], t), "log_emit must be a floating tensor of shape"),
    (lambda e, t: dag_loss(e.long(), t), "log_emit must be a floating tensor"),
    (lambda e, t: dag_loss(e, t[:, :5]), r"log_trans must have shape \(B, L, L\) = \(2, 7, 7\)"),
    (lambda e, t: dag_loss(e, t.float()), "log_trans must have log_emit's dtype"),
    (lambda e, t: dag_loss(e, t, torch.tensor([1.0, 2.0])), "target_lengths must be an integer tensor"),
    (lambda e, t: dag_loss(e, t, torch.tensor([4, 1])), r"target_lengths must lie in \[0, 3\]"),
    (lambda e, t: dag_loss(e, t, None, torch.tensor([1, 7])), r"node_counts must lie in \[2, 7\]"),
    (lambda e, t: dag_loss(e, t, None, torch.tensor([7])), r"node_counts must be an integer tensor of shape \(2,\)"),
    (lambda e, t: dag_loss(e, t, backend="gpu"), "backend must be one of"),
    (lambda e, t: dag_loss(e, t, backend="cuda"), "the cuda backend needs CUDA tensors"),
])
def test_bad_arguments_are_named(call, message):
    log_emit, log_trans = random_dag(2, 3, 7)
    with pytest.raises(ValueError, match=message):
        call(log_emit, log_trans)


def test_backend_setting_and_keyword(monkeypatch):
    log_emit, log_trans = random_dag(2, 3, 7)
    with pytest.raises(ValueError, match="align.backend must be one of"):
        maskbench.align.use_backend("nonsense")
    monkeypatch.setattr(maskbench.align, "_setting", "cuda")
    with pytest.raises(ValueError, match="the cuda backend needs CUDA tensors"):
        dag_loss(log_emit, log_trans)
    expected = reference_loss(log_emit, log_trans)
    torch.testing.assert_close(dag_loss(log_emit, log_trans, backend="reference"), expected)  # keyword wins
    maskbench.align.use_backend("reference")
    torch.testing.assert_close(dag_loss(log_emit, log_trans), expected)


def reference_and_autograd(log_emit, log_trans):
    """log Z and both gradients of the reference and of autograd through logsumexp."""
    results = []
    for loss in (reference_loss, reference.dag_loss_autograd):
        e, t = log_emit.clone().requires_grad_(True), log_trans.clone().requires_grad_(True)
        log_z = loss(e, t)
        results.append((log_z, *torch.autograd.grad(log_z.sum(), [e, t])))
    return results


def test_edge_posteriors_keep_their_mass_when_the_best_node_is_a_dead_end():
    """y1 is emitted well only by node 4, from which y2 has no node left; every other emission
    is 650 nats worse. Shifting by the dead end's score would overflow the u side (capped, mass
    is lost: an edge gradient 0.167 off, summing to 2 instead of m + 1 = 3)."""
    log_emit = torch.full((1, 2, 6), -650.0, dtype=torch.float64)
    log_emit[0, 0, 4] = 0.0
    log_trans = torch.zeros(1, 6, 6, dtype=torch.float64)
    ours, theirs = reference_and_autograd(log_emit, log_trans)
    for mine, expected in zip(ours, theirs):
        torch.testing.assert_close(mine, expected)
    torch.testing.assert_close(ours[2].sum(), torch.tensor(3.0, dtype=torch.float64))


def test_forward_does_not_underflow_behind_a_dead_end():
    """y1 is best at node 3, a dead end; the two paths that exist score -1600. The shifted sum
    of step 2 underflowed to 0, so log Z was -inf with a false "no path" warning."""
    log_emit = torch.full((1, 2, 5), -800.0, dtype=torch.float64)
    log_emit[0, 0, 3] = 0.0
    log_trans = torch.zeros(1, 5, 5, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        log_z = dag_loss(log_emit, log_trans, backend="reference")
    torch.testing.assert_close(log_z[0].item(), brute_log_z(log_emit[0], log_trans[0], 2, 5))


def test_exact_fallbacks_when_one_step_spans_more_than_float64_range(monkeypatch):
    log_emit, log_trans = two_disjoint_routes()
    fallbacks = []
    exact = reference.exact_edge_posteriors
    monkeypatch.setattr(reference, "exact_edge_posteriors", lambda *a: fallbacks.append(1) or exact(*a))
    e, t = log_emit.clone().requires_grad_(True), log_trans.clone().requires_grad_(True)
    log_z = reference_loss(e, t)
    grad_emit, grad_trans = torch.autograd.grad(log_z.sum(), [e, t])
    assert fallbacks
    torch.testing.assert_close(log_z[0].item(), brute_log_z(log_emit[0], log_trans[0], 2, 6))
    first_route = math.exp(-1000 - log_z.item())                # posterior of 0 -> 1 -> 3 -> 5
    expected = torch.zeros(6, 6, dtype=torch.float64)
    for v, u in [(0, 1), (1, 3), (3, 5)]:
        expected[v, u] = first_route
    for v, u in [(0, 2), (2, 4), (4, 5)]:
        expected[v, u] = 1 - first_route
    torch.testing.assert_close(grad_trans[0], expected)
    torch.testing.assert_close(grad_emit[0].sum(-1), torch.ones(2, dtype=torch.float64))


def test_no_fallback_on_ordinary_scores(monkeypatch):
    """The exact paths are for extreme inputs: ordinary log-probabilities stay on the BLAS path."""
    def refuse(*args):
        raise AssertionError("exact fallback used")
    monkeypatch.setattr(reference, "exact_edge_posteriors", refuse)
    monkeypatch.setattr(torch, "logsumexp", refuse)
    log_emit, log_trans, m, n = ragged_batch(seed=2)
    log_z = reference_loss(log_emit.requires_grad_(True), log_trans.requires_grad_(True), m, n)
    log_z.sum().backward()


def test_auto_backend_picks_the_kernel_where_cuda_and_cupy_work(monkeypatch):
    """The dispatch itself, without a GPU: "auto" follows the device, and CUDA needs CuPy."""
    monkeypatch.setattr(maskbench.align, "_setting", "auto")
    monkeypatch.setattr(cuda, "unavailable_reason", lambda: None)
    monkeypatch.setattr(maskbench.alignment_record, "kernel_pays", lambda shape: True)   # a record where it won
    assert resolve_backend(None, torch.device("cuda")) == "cuda"
    assert resolve_backend(None, torch.device("cpu")) == "reference"
    assert resolve_backend("reference", torch.device("cuda")) == "reference"
    monkeypatch.setattr(cuda, "unavailable_reason", lambda: "ImportError: no cupy")
    with pytest.raises(RuntimeError, match="CuPy does not work here"):
        resolve_backend(None, torch.device("cuda"))


def count_host_syncs(monkeypatch):
    """Count the tensor -> Python bool conversions (each one a device sync on a GPU)."""
    calls = []
    to_bool = torch.Tensor.__bool__
    monkeypatch.setattr(torch.Tensor, "__bool__", lambda self: calls.append(1) or to_bool(self))
    return calls


def test_one_host_sync_per_pass_not_per_step(monkeypatch):
    """Issue 66 (4): the underflow check asked the device once per DP step (~330 us each on a
    GPU); now each pass asks once, whatever the number of steps (here 21)."""
    log_emit, log_trans = random_dag(3, 20, 40, seed=3)
    m, n = torch.tensor([20, 12, 5]), torch.tensor([40, 30, 40])
    emissions = reference.step_emissions(log_emit, m, n)
    edges = reference.forward_edges(log_trans, n)
    syncs = count_host_syncs(monkeypatch)
    alpha = reference.forward_alpha(emissions, edges)
    assert len(syncs) == 1
    log_z = reference.read_log_z(alpha, m, n)
    reference.backward_posteriors(emissions, edges, alpha, log_z, m, n)
    assert len(syncs) == 3                                      # the beta pass, the edge-sum check


def test_a_pass_that_underflows_is_run_again_exactly(monkeypatch):
    """The dead-end case of test_forward_does_not_underflow_behind_a_dead_end: the first pass
    only flags the lost entry, the second redoes it (a sync per step, only in such a pass)."""
    log_emit = torch.full((1, 2, 5), -800.0, dtype=torch.float64)
    log_emit[0, 0, 3] = 0.0
    emissions = reference.step_emissions(log_emit, torch.tensor([2]), torch.tensor([5]))
    edges = reference.forward_edges(torch.zeros(1, 5, 5, dtype=torch.float64), torch.tensor([5]))
    _, flagged = reference._forward_steps(emissions, edges, redo=False)
    assert flagged.item()
    syncs = count_host_syncs(monkeypatch)
    alpha = reference.forward_alpha(emissions, edges)
    assert len(syncs) > 1
    torch.testing.assert_close(alpha[0, 3, 4].item(), brute_log_z(log_emit[0], torch.zeros(5, 5), 2, 5))
