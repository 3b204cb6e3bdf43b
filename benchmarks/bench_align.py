"""Benchmark of the states-alignment DP (maskbench.align).

CPU: the reference (scaled forward + beta/posterior backward) against plain autograd through one
logsumexp per step, forward + backward on float32 inputs, at B=32, M=20, L=80 and at ExLM's
paper size B=64, M=77, L=308 (512 tokens, 15% masked, k=4). Times are the median of interleaved
repeats; peak memory is the growth of the resident set during one forward + backward, each
measured in a fresh process. Ratios come from the same run.

GPU (only where CUDA and CuPy are present): both kernels, the one-block `cuda` and the split
`cuda_split` (several blocks per sequence), against the reference at the paper size and at k=8,
p=0.387, with time, peak memory and each kernel's effective bandwidth (the bytes the inputs and
gradients must move, over the time) against the device's peak.

    python benchmarks/bench_align.py                 # writes benchmarks/results/align_cpu.json
    python benchmarks/bench_align.py --repeats 5 --threads 1
"""

import argparse
import functools
import json
import multiprocessing
import os
import platform
import re
import statistics
import time
from pathlib import Path

import torch

from maskbench.align import cuda, dag_loss, reference
from maskbench.alignment_record import KERNEL_BACKENDS

RESULTS = Path(__file__).resolve().parent / "results"
CPU_SIZES = {"small": (32, 20, 80), "paper_k4": (64, 77, 308)}
# The paper's two sizes first, then the sizes between them where the kernel's speed-up over the
# reference crosses 1 (an H200 measured 3.5x at the first, 0.6x at the second: docs/notes/2026-11-28-gpu-suite-h200.md)
GPU_SIZES = {"paper_k4": (64, 77, 308), "k8_p0.387": (64, 198, 1586),
             "k4_p0.387": (64, 198, 792), "k8_p0.15": (64, 77, 616), "k2_p0.387": (64, 198, 396)}
METHODS = {"reference": functools.partial(dag_loss, backend="reference"),
           "autograd_logsumexp": reference.dag_loss_autograd}


def make_inputs(B, M, L, device="cpu"):
    g = torch.Generator().manual_seed(0)
    log_emit = torch.randn(B, M, L, generator=g).log_softmax(-1)
    log_trans = torch.randn(B, L, L, generator=g).log_softmax(-1)
    return log_emit.to(device).requires_grad_(True), log_trans.to(device).requires_grad_(True)


def forward_backward(loss, log_emit, log_trans):
    log_z = loss(log_emit, log_trans)
    (-log_z.sum()).backward()
    log_emit.grad = log_trans.grad = None


def _proc_kib(field):
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def _peak_rss_worker(method, size, threads, queue):
    torch.set_num_threads(threads)
    inputs = make_inputs(*size)
    forward_backward(METHODS[method], *make_inputs(2, 3, 8))  # load code paths before measuring
    before = _proc_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark to the current RSS
    forward_backward(METHODS[method], *inputs)
    queue.put((_proc_kib("VmHWM") - before) / 1024)


def peak_rss_mib(method, size, threads):
    """Resident-set growth (MiB) during one forward + backward, in a fresh process."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    worker = context.Process(target=_peak_rss_worker, args=(method, size, threads, queue))
    worker.start()
    result = queue.get()
    worker.join()
    return result


def bench_cpu(repeats, threads):
    torch.set_num_threads(threads)
    report = {}
    for name, size in CPU_SIZES.items():
        inputs = make_inputs(*size)
        times = {method: [] for method in METHODS}
        for method, loss in METHODS.items():
            forward_backward(loss, *inputs)  # warm-up
        for _ in range(repeats):  # interleaved, so a noisy neighbour hurts both alike
            for method, loss in METHODS.items():
                start = time.perf_counter()
                forward_backward(loss, *inputs)
                times[method].append(time.perf_counter() - start)
        peaks = {method: peak_rss_mib(method, size, threads) for method in METHODS}
        entry = {"B_M_L": size}
        for method in METHODS:
            entry[method] = {"seconds_median": statistics.median(times[method]),
                             "seconds_all": times[method], "peak_rss_mib": peaks[method]}
        entry["speedup"] = (entry["autograd_logsumexp"]["seconds_median"]
                            / entry["reference"]["seconds_median"])
        entry["memory_ratio"] = peaks["autograd_logsumexp"] / peaks["reference"]
        report[name] = entry
        print(f"{name} {size}: reference {entry['reference']['seconds_median']:.3f} s, "
              f"{peaks['reference']:.0f} MiB; autograd {entry['autograd_logsumexp']['seconds_median']:.3f} s, "
              f"{peaks['autograd_logsumexp']:.0f} MiB; speedup {entry['speedup']:.1f}x, "
              f"memory {entry['memory_ratio']:.1f}x less", flush=True)
    return report


def device_peak_bandwidth_gbs():
    """Theoretical DRAM bandwidth from the device properties, or None if the driver hides it."""
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(torch.cuda.current_device())
    clock_khz, bus_bits = props.get("memoryClockRate"), props.get("memoryBusWidth")
    return 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9 if clock_khz and bus_bits else None


def bench_gpu(repeats):
    from maskbench.align import dag_loss
    report = {"device": torch.cuda.get_device_name(), "peak_bandwidth_gbs": device_peak_bandwidth_gbs()}
    for name, (B, M, L) in GPU_SIZES.items():
        inputs = make_inputs(B, M, L, device="cuda")
        entry = {"B_M_L": (B, M, L)}
        for backend in (*KERNEL_BACKENDS, "reference"):
            loss = lambda e, t: dag_loss(e, t, backend=backend)
            forward_backward(loss, *inputs)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                forward_backward(loss, *inputs)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            entry[backend] = {"seconds_median": statistics.median(times), "seconds_all": times,
                              "peak_mib": (torch.cuda.max_memory_allocated() - base) / 2**20}
        # Bytes that must move: read both inputs, write both gradients (float32).
        moved = 4 * 2 * (B * M * L + B * L * L)
        for backend in KERNEL_BACKENDS:                    # "cuda"'s keys unsuffixed, as before the split kernel
            suffix = "" if backend == "cuda" else "_" + backend
            entry["effective_bandwidth_gbs" + suffix] = moved / entry[backend]["seconds_median"] / 1e9
            entry["speedup" + suffix] = entry["reference"]["seconds_median"] / entry[backend]["seconds_median"]
        report[name] = entry
        print(name, json.dumps(entry), flush=True)
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per method and size")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch CPU threads")
    parser.add_argument("--skip-cpu", action="store_true", help="only the GPU part")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    machine = {"cpu": platform.processor() or platform.machine(), "threads": args.threads,
               "torch": torch.__version__}
    if not args.skip_cpu:
        load_before = os.getloadavg()  # the machine may be shared: record how busy it was
        sizes = bench_cpu(args.repeats, args.threads)
        report = {"machine": {**machine, "load_average_1_5_15_min": {"before": load_before, "after": os.getloadavg()}},
                  "repeats": args.repeats, "sizes": sizes}
        (RESULTS / "align_cpu.json").write_text(json.dumps(report, indent=2) + "\n")
    if torch.cuda.is_available() and cuda.available():
        report = {"machine": machine, "repeats": args.repeats, "sizes": bench_gpu(args.repeats)}
        (RESULTS / "align_gpu.json").write_text(json.dumps(report, indent=2) + "\n")
    else:
        print("no CUDA device with CuPy: GPU part skipped")


if __name__ == "__main__":
    main()
