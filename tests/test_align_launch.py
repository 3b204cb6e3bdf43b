"""The CUDA backend's launch path (align/cuda.py) on a CPU, through a stand-in for CuPy.

The CPU tests of test_align_kernel.py check the kernel's arithmetic (align_support/host.py) and
its NVRTC compile; this file checks what lies between: what cuda.py hands to CuPy. The stand-in
keeps CuPy's contract where it matters and nothing else:
- `from_dlpack` goes through the tensor's `__dlpack__` (numpy's import of a CPU tensor), so a
  tensor that requires grad is refused with torch's own BufferError, as on a GPU;
- `RawModule(code=...)` knows the kernels that the source's `extern "C" __global__` declarations
  name, and a kernel's launch checks its argument tuple against the declaration: the count, an
  array of the right dtype (float* float32, double* float64, int* int32, C-contiguous) for each
  pointer and an np.int32 for each int (CuPy would pass a Python int as a 64-bit value);
- a checked launch runs the kernel's host twin (align_support/host.py: same name, same
  parameters after the block count B = grid[-1]) on the arrays, which share memory with the
  tensors, so the results are real and are compared with the reference;
- a launch with more than 48 KB of dynamic shared memory is refused unless the kernel's
  `max_dynamic_shared_size_bytes` was raised to cover it, as CUDA refuses it;
- `cuda.Device` and `cuda.ExternalStream` are do-nothing context managers, and
  `torch.cuda.current_stream` is patched to a stream with a null handle.
The public `dag_loss` and `dag_best_path` are driven with backend="cuda" on CPU tensors (the
check that refuses them is patched out), so the test covers the custom operators' autograd
wiring that training uses, not only cuda.py.
"""

import ctypes
import re
import sys
import types

import numpy as np
import pytest
import torch

import maskbench.align
from maskbench import alignment_record
from maskbench.align import ImpossibleAlignmentWarning, cuda, dag_best_path, dag_loss, reference, split
from tests.align_support import host
from tests.helpers import run_pretrain, smoke_config

DECLARATION = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\(\d+\)\s+)?(\w+)\s*\(([^)]*)\)')
HOST_DEFINITION = re.compile(r"^void\s+(\w+)\s*\(([^)]*)\)", re.MULTILINE)
POINTEE_DTYPES = {"float": np.float32, "double": np.float64, "int": np.int32}


def parameters(text: str) -> list[tuple[str, str]]:
    """C parameter list -> [(type, name)], e.g. "const float* emit, int M" ->
    [("float*", "emit"), ("int", "M")] (const dropped: it does not change what is passed)."""
    out = []
    for declaration in text.split(","):
        *words, name = declaration.replace("*", "* ").split()
        out.append(("".join(w for w in words if w != "const"), name))
    return out


def kernel_signatures(source: str) -> dict[str, list[tuple[str, str]]]:
    return {name: parameters(params) for name, params in DECLARATION.findall(source)}


class StandInKernel:
    def __init__(self, name, signature, launches):
        self.name, self.signature, self.launches = name, signature, launches

    def __call__(self, grid, block, args, *, shared_mem=0):
        for dims in (grid, block):
            if not (isinstance(dims, tuple) and 1 <= len(dims) <= 3
                    and all(isinstance(d, int) and d > 0 for d in dims)):
                raise ValueError(f"{self.name}: grid and block must be tuples of 1-3 positive ints, got {dims}")
        if not isinstance(args, tuple) or len(args) != len(self.signature):
            expected = ", ".join(f"{t} {n}" for t, n in self.signature)
            raise TypeError(f"{self.name}({expected}) takes {len(self.signature)} arguments, "
                            f"launched with {len(args) if isinstance(args, tuple) else args!r}")
        for (ctype, name), arg in zip(self.signature, args):
            _check_argument(self.name, ctype, name, arg)
        if shared_mem > max(cuda.SHARED_BYTES_LIMIT, getattr(self, "max_dynamic_shared_size_bytes", 0)):
            raise RuntimeError(f"{self.name}: {shared_mem} bytes of dynamic shared memory without opting in "
                               "(max_dynamic_shared_size_bytes): CUDA refuses the launch")
        self.launches.append((self.name, grid, block, shared_mem))
        twin = getattr(host.library(), self.name)
        twin(grid[-1], *(ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else int(a) for a in args))


def _check_argument(kernel, ctype, name, arg):
    where = f"{kernel}: argument {name!r} ({ctype})"
    if ctype.endswith("*"):
        dtype = POINTEE_DTYPES[ctype[:-1]]
        if not isinstance(arg, np.ndarray):
            raise TypeError(f"{where} needs an array, got {type(arg).__name__}")
        if arg.dtype != dtype or not arg.flags.c_contiguous:
            raise TypeError(f"{where} needs a contiguous {np.dtype(dtype)} array, got {arg.dtype} "
                            f"(contiguous: {arg.flags.c_contiguous})")
    elif ctype == "int":
        if type(arg) is not np.int32:
            raise TypeError(f"{where} needs an np.int32, got {type(arg).__name__}")
    else:
        raise TypeError(f"{where}: the stand-in does not know this parameter type")


class StandInModule:
    def __init__(self, code, options=(), launches=None):
        self.signatures = kernel_signatures(code)
        self.launches = launches

    def get_function(self, name):
        if name not in self.signatures:
            raise KeyError(f"no kernel {name!r} in the module (it declares {sorted(self.signatures)})")
        return StandInKernel(name, self.signatures[name], self.launches)


class NullContext:
    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def stand_in_cupy(launches: list) -> types.ModuleType:
    cupy = types.ModuleType("cupy")
    cupy.from_dlpack = lambda tensor: np.from_dlpack(tensor)   # calls tensor.__dlpack__()
    cupy.RawModule = lambda code, options=(): StandInModule(code, options, launches)
    cupy.cuda = types.SimpleNamespace(Device=NullContext, ExternalStream=NullContext,
                                      runtime=types.SimpleNamespace(getDeviceCount=lambda: 1))
    return cupy


@pytest.fixture
def launches(monkeypatch):
    """Install the stand-in as `cupy` and let backend="cuda" take CPU tensors; yield the list
    of launches the stand-in records."""
    recorded = []
    monkeypatch.setitem(sys.modules, "cupy", stand_in_cupy(recorded))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=0))
    monkeypatch.setattr(maskbench.align, "resolve_backend", lambda backend, device, shape: backend or "reference")
    cuda._module.cache_clear()
    yield recorded
    cuda._module.cache_clear()


def ragged_batch(seed, B=5, M=6, L=20, dtype=torch.float32):
    """Sizes that differ per sequence, the first at the padded maximum, the last impossible."""
    g = torch.Generator().manual_seed(seed)
    n = torch.randint(2, L + 1, (B,), generator=g)
    m = torch.minimum(torch.randint(0, M + 1, (B,), generator=g), (n - 2).clamp(min=0))
    m[0], n[0] = M, L
    m[-1], n[-1] = 3, 4
    log_emit = torch.randn(B, M, L, generator=g, dtype=torch.float64).log_softmax(-1)
    log_trans = torch.randn(B, L, L, generator=g, dtype=torch.float64).log_softmax(-1)
    return log_emit.to(dtype), log_trans.to(dtype), m, n


def test_the_stand_in_reads_every_kernel_of_dag_cu():
    signatures = kernel_signatures(cuda.kernel_source())
    assert set(signatures) == {"dag_forward", "dag_backward", "dag_best_path",
                               "dag_split_forward", "dag_split_backward"}
    assert signatures["dag_forward"][:2] == [("float*", "emit"), ("float*", "trans_t")]
    assert all(t in {"int", "float*", "double*", "int*"} for sig in signatures.values() for t, _ in sig)


def test_host_twins_take_the_kernels_parameters_after_the_block_count():
    """What the stand-in relies on to run a launch: host.py defines each kernel of dag.cu under
    its name, with its parameters, after an int block count (B, or B * ctas for the split kernels)."""
    kernels = kernel_signatures(cuda.kernel_source())
    twins = {name: parameters(params) for name, params in HOST_DEFINITION.findall(host.HOST_SOURCE)}
    counts = {name: ("int", "blocks" if "split" in name else "B") for name in kernels}
    assert {name: sig[0] for name, sig in twins.items()} == counts
    assert {name: sig[1:] for name, sig in twins.items()} == kernels


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_loss_and_gradients_through_the_launch_path(launches, dtype):
    """Forward and backward as a training step runs them: the inputs require grad, and the
    backward pass hands the kernels the forward's tables and log Z again."""
    log_emit, log_trans, m, n = ragged_batch(0, dtype=dtype)
    weight = torch.randn(len(m), generator=torch.Generator().manual_seed(1), dtype=dtype)
    results = {}
    for backend in ("cuda", "reference"):
        e, t = log_emit.clone().requires_grad_(True), log_trans.clone().requires_grad_(True)
        with pytest.warns(ImpossibleAlignmentWarning, match=rf"batch indices \[{len(m) - 1}\]"):
            log_z = dag_loss(e, t, m, n, backend=backend)
        impossible = torch.isinf(log_z)
        (log_z.masked_fill(impossible, 0) * weight.masked_fill(impossible, 0)).sum().backward()
        results[backend] = (log_z.detach(), e.grad, t.grad)
    assert [launch[0] for launch in launches] == ["dag_forward", "dag_backward"]
    L = log_emit.shape[2]
    for _, grid, block, shared_mem in launches:
        assert grid == (len(m),) and block == (32 * L,)       # a warp per node: L = 20 nodes, 20 warps
        assert shared_mem == 4 * (2 * L + L)                  # two rows of L floats, a float per warp
    for ours, expected in zip(results["cuda"], results["reference"]):
        assert ours.dtype == dtype
        torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-4)
    assert torch.isneginf(results["cuda"][0][-1])


@pytest.mark.parametrize("L,sms,shared_limit,slab", [(100, 1, 232_448, True), (100, 8, 232_448, True),
                                                     (100, 8, 4096, False), (400, 8, 232_448, True)],
                         ids=["one-block-slab", "split-slab", "split-streamed", "split-slab-opted-in"])
def test_split_loss_and_gradients_through_the_launch_path(launches, monkeypatch, L, sms, shared_limit, slab):
    """backend="cuda_split" as training runs it, on a device of `sms` SMs: split_geometry's
    launch (grid B * ctas, the counters zeroed; at L = 400 a slab of 160 KB, which needs the
    kernel's opt-in), then the one-block Viterbi kernel."""
    monkeypatch.setattr(split, "device_limits", lambda index: (sms, shared_limit))
    log_emit, log_trans, m, n = ragged_batch(0, L=L)
    weight = torch.randn(len(m), generator=torch.Generator().manual_seed(1))
    results = {}
    for backend in ("cuda_split", "reference"):
        e, t = log_emit.clone().requires_grad_(True), log_trans.clone().requires_grad_(True)
        with pytest.warns(ImpossibleAlignmentWarning):
            log_z = dag_loss(e, t, m, n, backend=backend)
        impossible = torch.isinf(log_z)
        (log_z.masked_fill(impossible, 0) * weight.masked_fill(impossible, 0)).sum().backward()
        results[backend] = (log_z.detach(), e.grad, t.grad)
    B = len(m)
    geometry = split.split_geometry(B, L, sms, shared_limit)
    assert geometry.slab == slab and (geometry.ctas > 1) == (sms > 1)
    assert [launch[0] for launch in launches] == ["dag_split_forward", "dag_split_backward"]
    for _, grid, block, shared_mem in launches:
        assert (grid, block, shared_mem) == ((B * geometry.ctas,), (geometry.threads,), geometry.shared_bytes)
    for ours, expected in zip(results["cuda_split"], results["reference"]):
        torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-4)
    dag_best_path(log_emit, log_trans, m, n, backend="cuda_split")
    assert launches[-1][0] == "dag_best_path"


DEVICES = {"sm_80": (108, split.SHARED_OPTIN_BYTES[8]), "sm_90": (132, split.SHARED_OPTIN_BYTES[9])}


@pytest.mark.parametrize("arch", DEVICES)
@pytest.mark.parametrize("B", [1, 2, 16, 32, 64, 256])
@pytest.mark.parametrize("L", [2, 20, 33, 77, 308, 396, 616, 792, 1586, 2048, 4096, 8192])
def test_split_geometry_contract(arch, B, L):
    """Every node in exactly one block (blocks of `nodes` consecutive nodes, none empty), whole
    warps up to 1,024 threads and no more warps than nodes, at most one block per 32 nodes
    unless the slab asks for more and then fits in one wave (a block per SM), and the shared
    memory that dag.cuh's layout needs, within the device's limit."""
    sms, limit = DEVICES[arch]
    g = split.split_geometry(B, L, sms, limit)
    owner = [u // g.nodes for u in range(L)]
    assert sorted(set(owner)) == list(range(g.ctas))                      # each block has nodes, each node one block
    assert g.threads % 32 == 0 and 32 <= g.threads <= 1024 and g.threads <= 32 * g.nodes
    assert g.ctas <= -(-L // 32) or (g.slab and B * g.ctas <= sms)
    assert g.shared_bytes == 4 * host.library().dag_split_scratch_floats(L, g.nodes, g.ctas, int(g.slab))
    assert g.shared_bytes + split.STATIC_SHARED_BYTES <= limit
    assert g.grid(B) < 2 ** 31


@pytest.mark.parametrize("B,L,ctas,slab", [(64, 308, 5, True), (64, 1586, 5, False), (16, 1586, 17, False),
                                           (2, 1586, 50, True), (64, 77, 3, True)])
def test_split_geometry_on_an_h200(B, L, ctas, slab):
    """The launches the next lease times (132 SMs, 227 KB): the paper's shapes spread over about
    two blocks per SM; the slab where it fits, or where few sequences leave SMs for its blocks."""
    g = split.split_geometry(B, L, 132, split.SHARED_OPTIN_BYTES[9])
    assert (g.ctas, g.slab) == (ctas, slab)


def test_rows_too_long_for_the_split_kernel_are_refused():
    refusal = r"L = 60000 needs .* bytes, over the 166896 .*\(166912 less 16 static\).*align: \{backend: reference\}"
    with pytest.raises(ValueError, match=refusal):
        split.split_geometry(64, 60_000, 108, split.SHARED_OPTIN_BYTES[8])


def test_best_path_through_the_launch_path(launches):
    log_emit, log_trans, m, n = ragged_batch(2)
    score, path = dag_best_path(log_emit.requires_grad_(True), log_trans.requires_grad_(True), m, n, backend="cuda")
    expected_score, expected_path = reference.dag_best_path(log_emit.detach(), log_trans.detach(), m, n)
    assert [launch[0] for launch in launches] == ["dag_best_path"]
    torch.testing.assert_close(score, expected_score, rtol=1e-4, atol=1e-4)
    assert torch.equal(path, expected_path)


def test_empty_batch_launches_nothing(launches):
    log_emit, log_trans = torch.zeros(0, 3, 6), torch.zeros(0, 6, 6)
    lengths = torch.zeros(0, dtype=torch.long)
    assert dag_loss(log_emit, log_trans, lengths, lengths, backend="cuda").shape == (0,)
    assert not launches


def forward_arguments():
    log_emit, log_trans, m, n = ragged_batch(3)
    emit, trans, m, n = cuda._prepare(log_emit, log_trans, m, n)
    B, M, L = emit.shape
    offsets, scales = cuda._table(B, M, L, "cpu")
    return [emit, trans, m, n, M, L, offsets, scales, torch.zeros(B, dtype=torch.float64)]


@pytest.mark.parametrize("change,message", [
    (lambda a: a[:4] + a[5:], r"takes 9 arguments, launched with 8"),
    (lambda a: a + [1], r"takes 9 arguments, launched with 10"),
    (lambda a: [a[0].double()] + a[1:], r"'emit' \(float\*\) needs a contiguous float32 array, got float64"),
    (lambda a: a[:2] + [a[2].long()] + a[3:], r"'target_lengths' \(int\*\) needs a contiguous int32 array"),
    (lambda a: [a[0].transpose(1, 2)] + a[1:], r"'emit' .* \(contiguous: False\)"),
])
def test_the_stand_in_refuses_what_cupy_would(launches, change, message):
    """So that CI fails on a launch with a wrong argument list, as a GPU would (or worse, would
    not: a wrong scalar width silently shifts every later argument)."""
    with pytest.raises(TypeError, match=message):
        cuda._launch("dag_forward", (5,), (32,), *change(forward_arguments()))
    assert not launches


def test_the_stand_in_refuses_what_cupy_would_below_launch(launches):
    """What cuda._launch guards against: a tensor that requires grad (torch's own refusal), a
    Python int for an `int` parameter, a kernel name the source does not declare."""
    import cupy
    with pytest.raises(BufferError, match="Can't export tensors that require gradient"):
        cupy.from_dlpack(torch.zeros(3, requires_grad=True))
    arguments = forward_arguments()
    converted = [np.from_dlpack(a) if isinstance(a, torch.Tensor) else a for a in arguments]
    kernel = cuda._module(None).get_function("dag_forward")
    with pytest.raises(TypeError, match=r"'M' \(int\) needs an np.int32, got int"):
        kernel((5,), (32,), tuple(converted))
    with pytest.raises(KeyError, match="no kernel 'dag_fwd'"):
        cuda._module(None).get_function("dag_fwd")


@pytest.mark.parametrize("L,threads", [(2, 64), (20, 640), (308, 1024), (1586, 1024), (6128, 1024)])
def test_recursion_geometry_a_warp_per_node_and_rows_in_shared_memory(L, threads):
    """Up to 32 warps (a 1,024-thread block), never more warps than nodes; the scratch that
    dag.cu's kernels carve from shared memory (prev and raw rows of L floats, one float per warp)."""
    assert cuda.recursion_geometry(L) == (threads, 4 * (2 * L + threads // 32))


def test_rows_too_long_for_shared_memory_are_refused():
    with pytest.raises(ValueError, match=r"L = 6129 needs 49160 bytes.*align: \{backend: reference\}"):
        cuda.recursion_geometry(6129)


# Which backend a CUDA device gets: never the reference by accident. The device is only named
# (torch.device("cuda") needs no GPU), so these run on any CPU.

def measured(kernel_ms, reference_ms, B=64, M=77, L=308):
    return {"B": B, "M": M, "L": L, "kernel_ms": kernel_ms, "reference_ms": reference_ms, "record": "a/part-a.json"}


@pytest.fixture
def kernel_measured_faster(monkeypatch):
    """A crossover record in which the kernel won (the committed one is unmeasured)."""
    monkeypatch.setattr(alignment_record, "crossover_points", lambda: (measured(1.0, 10.0),))


@pytest.mark.usefixtures("kernel_measured_faster")
@pytest.mark.parametrize("cuda_version,extra", [("12.4", "gpu-cu12"), ("13.0", "gpu-cu13")])
def test_a_cuda_device_without_cupy_stops_naming_the_extra(monkeypatch, cuda_version, extra):
    monkeypatch.setitem(sys.modules, "cupy", None)          # `import cupy` raises ImportError
    monkeypatch.setattr(torch.version, "cuda", cuda_version)
    monkeypatch.setattr(maskbench.align, "_setting", "auto")
    with pytest.raises(RuntimeError, match=rf"pip install 'maskbench\[{extra}\]'.*align: \{{backend: reference\}}"):
        maskbench.align.resolve_backend(None, torch.device("cuda"))


def test_an_unknown_cuda_version_names_both_extras(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(RuntimeError, match=r"gpu-cu12\]' \(CUDA 12\) or 'maskbench\[gpu-cu13\]' \(CUDA 13\)"):
        maskbench.align.resolve_backend("cuda", torch.device("cuda"))


def test_the_reference_setting_runs_the_reference_and_says_so(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setattr(maskbench.align, "_setting", "auto")
    monkeypatch.setattr(maskbench.align, "_announced", set())
    monkeypatch.setattr(maskbench.align, "_used", None)
    maskbench.align.use_backend("reference")
    assert maskbench.align.resolve_backend(None, torch.device("cuda")) == "reference"
    log_emit, log_trans, m, n = ragged_batch(4, B=2)
    with caplog.at_level("INFO", logger="maskbench.align"), pytest.warns(ImpossibleAlignmentWarning):
        dag_loss(log_emit, log_trans, m, n)
        dag_loss(log_emit, log_trans, m, n)
    assert [r.getMessage() for r in caplog.records] == ["states alignment: PyTorch reference on cpu"]
    assert maskbench.align.backend_used() == "reference"


@pytest.mark.usefixtures("kernel_measured_faster")
def test_a_cuda_device_with_cupy_gets_the_kernel_where_the_record_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", stand_in_cupy([]))
    monkeypatch.setattr(maskbench.align, "_setting", "auto")
    assert maskbench.align.resolve_backend(None, torch.device("cuda")) == "cuda"
    assert maskbench.align.resolve_backend(None, torch.device("cpu")) == "reference"


def test_an_unmeasured_crossover_runs_the_reference_on_cuda(monkeypatch):
    """The committed record: the new kernel has not run on a GPU, so "auto" does not pick it."""
    monkeypatch.setitem(sys.modules, "cupy", stand_in_cupy([]))
    monkeypatch.setattr(maskbench.align, "_setting", "auto")
    assert alignment_record.crossover_points() == ()
    assert maskbench.align.resolve_backend(None, torch.device("cuda"), (64, 198, 1586)) == "reference"
    assert maskbench.align.resolve_backend("cuda", torch.device("cuda"), (64, 198, 1586)) == "cuda"


@pytest.mark.usefixtures("tracking_store")
@pytest.mark.parametrize("run,recorded", [("exlm", "reference"), ("mlm", None)])
def test_pretraining_records_the_backend_it_ran(corpus, tmp_path, run, recorded):
    """metrics.json and the MLflow run say which backend ExLM's alignment ran (None: no alignment)."""
    import mlflow
    metrics = run_pretrain(smoke_config(steps=1), run, corpus, tmp_path)
    assert metrics["align_backend"] == recorded
    tags = mlflow.get_run(mlflow.last_active_run().info.run_id).data.tags
    assert tags.get("align_backend") == recorded
