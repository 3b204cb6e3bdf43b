"""What ExLM's states alignment was measured to cost on a GPU, and what follows from it: which
backend `align.backend: auto` runs (maskbench.align) and what the plan prices an alignment at
(maskbench.resources). The data is src/maskbench/align/alignment_record.yaml, its one place; this
module reads it without importing torch, so that `maskbench plan` stays quick. It lies beside
the kernel it times, in the align package: like the kernel's source, a stage that aligns
depends on it (a new timing may change which backend runs, to float tolerance).

    kernel_pays((B, M, L))     # auto's choice on CUDA tensors: the kernel where it was the faster
    alignment_ms((B, M, L))    # forward + backward ms of the backend auto runs, from the record
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import yaml

RECORD = Path(__file__).resolve().parent / "align" / "alignment_record.yaml"
KERNEL_BACKENDS = ("cuda", "cuda_split")   # align.backend values that run a CuPy kernel (maskbench.align)
POINT_KEYS = {"B", "M", "L", "kernel_ms", "reference_ms", "record"}
TIMING_KEYS = {"B", "M", "L", "ms", "record"}


@functools.lru_cache(maxsize=None)
def _read() -> dict:
    record = yaml.safe_load(RECORD.read_text())
    for section, keys in (("points", POINT_KEYS), ("reference", TIMING_KEYS)):
        for index, entry in enumerate(record.get(section) or ()):
            if not isinstance(entry, dict) or not keys <= set(entry):
                raise ValueError(f"{RECORD}: {section}[{index}] needs the keys {sorted(keys)}, got {entry!r}")
    points = record.get("points") or ()
    if (record.get("status") == "unmeasured") != (not points):
        raise ValueError(f"{RECORD}: status {record.get('status')!r} with {len(points)} points; "
                         "status is 'unmeasured' exactly when there are none ('measured' otherwise)")
    return record


def crossover_points() -> tuple[dict, ...]:
    """The (B, M, L, kernel_ms, reference_ms) points where both backends were timed; () while unmeasured."""
    return tuple(_read().get("points") or ())


def reference_timings() -> tuple[dict, ...]:
    """Every recorded (B, M, L, ms) of the reference: the crossover points' and its own."""
    own = tuple(_read().get("reference") or ())
    return own + tuple({**p, "ms": p["reference_ms"]} for p in crossover_points())


def kernel_timings() -> tuple[dict, ...]:
    return tuple({**p, "ms": p["kernel_ms"]} for p in crossover_points())


def work(shape) -> float:
    """B * M * L^2: the (sequence, step, edge) triples a pass touches, up to a constant."""
    B, M, L = shape
    return B * M * L * L


def kernel_pays(shape) -> bool:
    """Whether "auto" runs the kernel on CUDA tensors of shape (B, M, L): the faster backend at
    the recorded point nearest in work (log scale); False while unmeasured."""
    points = crossover_points()
    if not points:
        return False
    nearest = min(points, key=lambda p: abs(math.log(work((p["B"], p["M"], p["L"])) / max(work(shape), 1))))
    return nearest["kernel_ms"] < nearest["reference_ms"]


def kernel_pays_somewhere() -> bool:
    """Whether "auto" runs the kernel at some shape (a plan's check for CuPy, before shapes are known)."""
    return any(p["kernel_ms"] < p["reference_ms"] for p in crossover_points())


def fit(timings) -> tuple[float, float]:
    """(ms per DP step, ms per unit of work) of t = a (M + 1) + b B M L^2, least squares over
    `timings`: a launch- and sync-bound part per step and a part proportional to the work. One
    timing fixes b alone (a = 0)."""
    rows = [((t["M"] + 1), work((t["B"], t["M"], t["L"])), t["ms"]) for t in timings]
    if len(rows) == 1:
        steps, units, ms = rows[0]
        return 0.0, ms / units
    saa = sum(s * s for s, _, _ in rows)
    sab = sum(s * u for s, u, _ in rows)
    sbb = sum(u * u for _, u, _ in rows)
    sat = sum(s * t for s, _, t in rows)
    sbt = sum(u * t for _, u, t in rows)
    det = saa * sbb - sab * sab
    a, b = (sat * sbb - sab * sbt) / det, (saa * sbt - sab * sat) / det
    if a < 0 or b < 0:                                          # noisy records: the proportional rule alone
        return 0.0, sum(t for _, _, t in rows) / sum(u for _, u, _ in rows)
    return a, b


def alignment_ms(shape) -> float:
    """Forward + backward milliseconds of one alignment of shape (B, M, L) on the recorded GPU,
    by the backend auto runs there, scaled from the record by `fit`'s rule."""
    timings = kernel_timings() if kernel_pays(shape) else reference_timings()
    if not timings:
        raise ValueError(f"{RECORD}: no timing of the backend `auto` runs at {tuple(shape)}")
    per_step, per_unit = fit(timings)
    return per_step * (shape[1] + 1) + per_unit * work(shape)
