"""The CUDA kernel without a GPU: dag.cu compiles to PTX through NVRTC, and its arithmetic
(dag.cuh, built for the CPU by tests/align_support/host.py) agrees with the PyTorch reference.
The tests marked gpu run the kernel itself and skip cleanly where CuPy or a device is missing."""


import pytest
import torch

import maskbench.align
import maskbench.alignment_record
from maskbench.align import cuda, dag_best_path, dag_loss, reference, split
from tests.align_support import build, host
from tests.helpers import two_disjoint_routes

KERNELS = ("dag_forward", "dag_backward", "dag_best_path", "dag_split_forward", "dag_split_backward")


def ragged_batch(seed, B=6, M=7, L=24, sparse=False, dtype=torch.float32, device="cpu"):
    """Random sizes per sequence (some at the padded maximum, one impossible), junk in padding."""
    g = torch.Generator().manual_seed(seed)
    n = torch.randint(2, L + 1, (B,), generator=g)
    n[0] = L
    m = torch.minimum(torch.randint(0, M + 1, (B,), generator=g), (n - 2).clamp(min=0))
    m[0] = M
    m[-1], n[-1] = 3, 4                                          # impossible: 3 targets, 2 interior nodes
    log_emit = torch.randn(B, M, L, generator=g, dtype=torch.float64).log_softmax(-1)
    log_trans = torch.randn(B, L, L, generator=g, dtype=torch.float64).log_softmax(-1)
    if sparse:
        log_trans = log_trans.masked_fill(torch.rand(B, L, L, generator=g) < 0.3, float("-inf"))
    to = dict(dtype=dtype, device=device)
    return log_emit.to(**to), log_trans.to(**to), m.to(device), n.to(device)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_kernel_compiles_to_ptx_with_nvrtc(arch):
    """Needs the NVRTC wheels of the `test` extra (cuda-bindings, nvidia-cuda-nvrtc-cu12)."""
    ptx = build.compile_ptx(arch)
    assert f".target {arch}" in ptx
    for name in KERNELS:
        assert f".entry {name}(" in ptx


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_kernel_fits_a_block_of_1024_threads_in_registers(arch):
    """The recursions launch up to 1,024 threads a block (cuda.recursion_geometry,
    split.split_geometry); an SM has 65,536 registers, so a thread may take at most 64. Without
    __launch_bounds__ the split kernels took 68-80 and would not have launched."""
    counts = build.register_counts(arch)
    assert set(counts) == set(KERNELS)
    assert all(0 < registers <= 65_536 // 1024 for registers in counts.values()), counts


def test_broken_source_reports_nvrtc_log(monkeypatch):
    monkeypatch.setattr(build, "kernel_source", lambda: "extern \"C\" __global__ void k() { oops; }")
    with pytest.raises(RuntimeError, match="identifier \"oops\" is undefined"):
        build.compile_ptx("sm_80")


def reference_tables(log_emit, log_trans, m, n):
    """The reference's alpha, log Z, w and gradients (float64) for comparison with the kernel's."""
    emissions = reference.step_emissions(log_emit, m, n)
    alpha = reference.forward_alpha(emissions, reference.forward_edges(log_trans, n))
    log_z = reference.read_log_z(alpha, m, n)
    grad_emit, grad_trans, w = reference.backward_posteriors(
        emissions, reference.forward_edges(log_trans, n), alpha, log_z, m, n)
    return alpha, log_z, w, grad_emit, grad_trans


def close(actual, expected):
    torch.testing.assert_close(actual.double(), expected.double(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("seed", range(3))
def test_host_arithmetic_matches_reference(seed, sparse):
    log_emit, log_trans, m, n = ragged_batch(seed, sparse=sparse)
    alpha, log_z, w, grad_emit, grad_trans = reference_tables(log_emit, log_trans, m, n)
    grad_z = torch.randn(len(m), generator=torch.Generator().manual_seed(seed))

    host_alpha, host_log_z = host.forward(log_emit, log_trans, m, n)
    close(host_alpha, alpha)
    close(host_log_z, log_z)
    assert torch.isneginf(host_log_z[-1])

    host_w, host_grad_emit, host_grad_trans = host.backward(
        log_emit, log_trans, m, n, host_alpha, host_log_z, grad_z)
    close(host_w, w)
    close(host_grad_emit, grad_emit * grad_z.view(-1, 1, 1))
    close(host_grad_trans, grad_trans * grad_z.view(-1, 1, 1))

    score, path = reference.dag_best_path(log_emit, log_trans, m, n)
    host_score, host_path = host.best_path(log_emit, log_trans, m, n)
    close(host_score, score)
    assert torch.equal(host_path, path)


LONG_ROWS = [
    pytest.param(7, 77, 308, False, id="k4-paper-77x308"),
    pytest.param(3, 300, 1100, False, id="300x1100-dense", marks=pytest.mark.slow),
    pytest.param(3, 300, 1100, True, id="300x1100-sparse", marks=pytest.mark.slow),
    pytest.param(5, 254, 2048, False, id="k8-254x2048", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("seed,M,L,sparse", LONG_ROWS)
def test_host_arithmetic_matches_reference_at_long_rows(seed, M, L, sparse):
    """Long recursions at the kernel's tolerance (rtol = atol = 1e-4): log Z reaches -700 to
    -3,600 nats, where float32 tables failed (at 300 x 1100: 38 of 660,000 emission and 61 of
    2,420,000 transition gradients off by up to 2.6e-4; the same was seen on a GPU). Two
    sequences: one at the full size, one impossible (ragged_batch's last)."""
    log_emit, log_trans, m, n = ragged_batch(seed, B=2, M=M, L=L, sparse=sparse)
    alpha, log_z, w, grad_emit, grad_trans = reference_tables(log_emit, log_trans, m, n)
    grad_z = torch.tensor([0.7, 1.3])
    host_alpha, host_log_z = host.forward(log_emit, log_trans, m, n)
    _, host_grad_emit, host_grad_trans = host.backward(
        log_emit, log_trans, m, n, host_alpha, host_log_z, grad_z)
    assert log_z[0] < -500 and torch.isneginf(host_log_z[1])
    tolerance = dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(host_log_z, log_z, **tolerance)
    torch.testing.assert_close(host_grad_emit.double(), grad_emit * grad_z.view(-1, 1, 1).double(), **tolerance)
    torch.testing.assert_close(host_grad_trans.double(), grad_trans * grad_z.view(-1, 1, 1).double(), **tolerance)
    score, path = reference.dag_best_path(log_emit, log_trans, m, n)
    host_score, host_path = host.best_path(log_emit, log_trans, m, n)
    torch.testing.assert_close(host_score.float(), score, **tolerance)
    assert torch.equal(host_path, path)


def segments_of(L, nodes, slab):
    """A split launch of `nodes` nodes per block, its slab in shared memory or not."""
    ctas = -(-L // nodes)
    return split.SplitGeometry(ctas, nodes, 32 * min(32, nodes), slab, 4 * split.scratch_floats(L, nodes, ctas, slab))


def check_split_twin(log_emit, log_trans, m, n, grad_z, geometry, tolerance):
    """The split kernels' twin against the reference: log Z, both gradients and the tables."""
    alpha, log_z, w, grad_emit, grad_trans = reference_tables(log_emit, log_trans, m, n)
    stalls = host.stalls()
    split_alpha, split_log_z = host.split_forward(log_emit, log_trans, m, n, geometry)
    split_w, split_grad_emit, split_grad_trans = host.split_backward(
        log_emit, log_trans, m, n, split_alpha, split_log_z, grad_z, geometry)
    assert host.stalls() == stalls, "a block waited on a block with a later ticket"
    torch.testing.assert_close(split_log_z, log_z, **tolerance)
    torch.testing.assert_close(split_alpha, alpha, **tolerance)
    torch.testing.assert_close(split_w, w, **tolerance)
    torch.testing.assert_close(split_grad_emit.double(), grad_emit * grad_z.view(-1, 1, 1).double(), **tolerance)
    torch.testing.assert_close(split_grad_trans.double(), grad_trans * grad_z.view(-1, 1, 1).double(), **tolerance)


@pytest.mark.parametrize("slab", [False, True], ids=["streamed", "slab"])
@pytest.mark.parametrize("nodes", [1, 5, 24])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("seed", range(2))
def test_split_host_arithmetic_matches_reference(seed, sparse, nodes, slab):
    """The split kernels' twin, blocks of 1 node (every predecessor in another block), 5 (a
    ragged last block, empty blocks past short sequences) and 24 (one block: the one-block
    kernel's schedule), with the transitions streamed or in the slab."""
    log_emit, log_trans, m, n = ragged_batch(seed, sparse=sparse)
    grad_z = torch.randn(len(m), generator=torch.Generator().manual_seed(seed))
    check_split_twin(log_emit, log_trans, m, n, grad_z, segments_of(24, nodes, slab), dict(rtol=1e-4, atol=1e-5))


@pytest.mark.parametrize("seed,M,L,sparse", LONG_ROWS)
def test_split_host_arithmetic_matches_reference_at_long_rows(seed, M, L, sparse):
    """As test_host_arithmetic_matches_reference_at_long_rows, at the geometry an H200 gets for
    64 sequences of that length (split_geometry: 132 SMs, 227 KB of shared memory a block)."""
    geometry = split.split_geometry(64, L, 132, split.SHARED_OPTIN_BYTES[9])
    assert geometry.ctas > 1
    check_split_twin(*ragged_batch(seed, B=2, M=M, L=L, sparse=sparse), torch.tensor([0.7, 1.3]), geometry,
                     dict(rtol=1e-4, atol=1e-4))


def test_split_host_arithmetic_keeps_scores_that_span_hundreds_of_nats():
    """The two routes of test_host_arithmetic_keeps_scores_that_span_hundreds_of_nats in blocks
    of two nodes: each block's scale follows its own route, 1,000 nats from the other's."""
    log_emit, log_trans = two_disjoint_routes()
    check_split_twin(log_emit.float(), log_trans.float(), torch.tensor([2]), torch.tensor([6]), torch.ones(1),
                     segments_of(6, 2, True), dict(rtol=1e-4, atol=1e-5))


def test_the_twin_counts_a_wait_on_a_later_ticket():
    """The mutant the stall count exists for: tickets that start past the first segment, so
    every second segment waits on a first segment that never ran (on a GPU: a hang)."""
    log_emit, log_trans, m, n = ragged_batch(0)
    geometry = segments_of(24, 8, False)
    emit, trans, m, n = host._prepare(log_emit, log_trans, m, n)
    B, M, L = emit.shape
    offsets, scales = split._table(B, M, L, geometry.ctas, "cpu")
    progress, ticket = split._counters(B, geometry, "cpu")
    trans_t, log_z = trans.transpose(1, 2).contiguous(), torch.empty(B, dtype=torch.float64)
    ticket += B
    stalls = host.stalls()
    host.library().dag_split_forward(geometry.grid(B), *map(host._ptr, (emit, trans_t, m, n)), B, M, L, geometry.ctas,
                                     geometry.nodes, 0, *map(host._ptr, (offsets, scales, log_z, progress, ticket)))
    assert host.stalls() > stalls


needs_gpu = pytest.mark.skipif(not (torch.cuda.is_available() and cuda.available()),
                               reason="needs a CUDA device and CuPy (pip install 'maskbench[gpu-cu12]' or gpu-cu13)")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("kernel", ["cuda", "cuda_split"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("seed,B,M,L", [(0, 6, 7, 24), (1, 16, 40, 170), (2, 4, 77, 308), (3, 2, 300, 1100),
                                         (5, 2, 254, 2048), (6, 64, 20, 1586)])
def test_kernel_matches_reference_on_gpu(seed, B, M, L, sparse, kernel):
    """Each kernel against the reference; at 64 x 1586 the split kernel runs several blocks a
    sequence in more than one wave (its counters and tickets under real concurrency)."""
    inputs = ragged_batch(seed, B, M, L, sparse=sparse, dtype=torch.float32, device="cuda")
    weight = torch.randn(B, generator=torch.Generator().manual_seed(seed)).cuda()  # both backends
    results = {}
    for backend in (kernel, "reference"):
        e = inputs[0].clone().requires_grad_(True)
        t = inputs[1].clone().requires_grad_(True)
        with pytest.warns(UserWarning, match="no path"):
            log_z = dag_loss(e, t, inputs[2], inputs[3], backend=backend)
        impossible = torch.isinf(log_z)
        (log_z.masked_fill(impossible, 0) * weight.masked_fill(impossible, 0)).sum().backward()
        results[backend] = (log_z, e.grad, t.grad)
    for ours, expected in zip(results[kernel], results["reference"]):
        torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@needs_gpu
def test_kernel_best_path_matches_reference_on_gpu():
    inputs = ragged_batch(4, 8, 20, 80, device="cuda")
    score, path = dag_best_path(*inputs, backend="cuda")
    expected_score, expected_path = dag_best_path(*inputs, backend="reference")
    torch.testing.assert_close(score, expected_score, rtol=1e-4, atol=1e-4)
    assert torch.equal(path, expected_path)


@pytest.mark.gpu
@needs_gpu
def test_auto_backend_picks_the_kernel_on_cuda_tensors(monkeypatch):
    monkeypatch.setattr(maskbench.align, "_setting", "auto")
    monkeypatch.setattr(maskbench.alignment_record, "kernel_pays", lambda shape: True)   # a record where it won
    calls = []
    monkeypatch.setattr(cuda, "forward_tables", lambda *args: calls.append(args) or reference.forward_tables(*args))
    dag_loss(*ragged_batch(5, device="cuda")[:2])
    assert calls


def test_host_arithmetic_keeps_scores_that_span_hundreds_of_nats(monkeypatch):
    """Two disjoint routes whose order flips by 1,000 nats between steps (see
    tests.helpers.two_disjoint_routes): float32 offsets from a float64 scale per step keep
    both in range, and the float32 product of the transitions' gradient, which cannot (its
    factors span ~80 nats), hands the sequence to the exact float64 sum."""
    log_emit, log_trans = two_disjoint_routes()
    m, n = torch.tensor([2]), torch.tensor([6])
    alpha, log_z, w, grad_emit, grad_trans = reference_tables(log_emit, log_trans, m, n)
    fallbacks = []
    exact = reference.exact_edge_posteriors
    monkeypatch.setattr(reference, "exact_edge_posteriors", lambda *a: fallbacks.append(1) or exact(*a))
    host_alpha, host_log_z = host.forward(log_emit.float(), log_trans.float(), m, n)
    _, host_grad_emit, host_grad_trans = host.backward(log_emit.float(), log_trans.float(), m, n, host_alpha,
                                                       host_log_z, torch.ones(1))
    assert fallbacks
    close(host_log_z, log_z)
    close(host_grad_emit, grad_emit)
    close(host_grad_trans, grad_trans)


def test_transition_gradient_product_is_full_float32(monkeypatch):
    """The trainer turns TF32 on (maskbench.device); the transitions' product must not use it."""
    seen = []
    bmm = torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda *a: seen.append(torch.backends.cuda.matmul.allow_tf32) or bmm(*a))
    log_emit, log_trans, m, n = ragged_batch(0)
    alpha, log_z = host.forward(log_emit, log_trans, m, n)
    saved = torch.backends.cuda.matmul.allow_tf32         # a settings object monkeypatch cannot restore
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        host.backward(log_emit, log_trans, m, n, alpha, log_z, torch.ones(len(m)))
        assert seen == [False] and torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
