"""The arithmetic a table was computed with, as its footer says it and as `maskbench compare`
reads it back: one phrase per kind of job record (`describe`), and whether two pages' phrases
name the same arithmetic (`key`), that is, the same rounding of every sum.

Two records compute the same bits when the same torch, MKL and oneDNN builds run on the same
number of threads with the same pins in force, on the same CPU model, and, on native paths, on
the same ATen path (MKL picks its branch per CPU model, ATen its kernels per instruction set).
In the reproducible mode the pins fix the ATen path, so it no longer matters: two AMD EPYCs, one
on ATen's AVX2 and one on its AVX-512 path, trained the same bits in it. The CPU model still
does: an Intel Xeon trained other bits in the same mode (2026-12-03, docs/reproducibility.md).
Kept apart from the footer's renderer so that reading a page does not import what drawing one
needs.
"""

from __future__ import annotations

import re

# The footer's sentence (maskbench.report.footer.arithmetic_sentence): one phrase, or each with its count.
ONE = re.compile(r"Arithmetic of its (?:runs' )?\d+ job(?: record)?s: (.+)$", re.MULTILINE)
SEVERAL = re.compile(r"Arithmetic differs between its runs' \d+ job records: (.+)$", re.MULTILINE)
UNRECORDED = "made before maskbench recorded it do not say"
PHRASE = re.compile(r"(?P<cpu>.+?) \(ATen (?P<aten>[^)]*)\), torch (?P<torch>\S+), MKL (?P<mkl>\S+), "
                    r"oneDNN (?P<onednn>\S+), (?P<threads>\d+) thread\(s\)(?:, GPU (?P<gpu>.+?))?, "
                    r"cpu_arithmetic (?P<mode>.+)$")
PIN = re.compile(r"\b([A-Z][A-Z0-9_]+)=([^,;)\s]+)")


def describe(record: dict) -> str:
    """One `arithmetic` record in a phrase: CPU, ATen path, builds, threads, mode (and GPU)."""
    gpu = f", GPU {record['gpu']} (CUDA {record['cuda']}, cuDNN {record['cudnn']})" if "gpu" in record else ""
    return (f"{record['cpu']} (ATen {record['cpu_capability']}), torch {record['torch']}, MKL {record['mkl']}, "
            f"oneDNN {record['onednn']}, {record['threads']} thread(s){gpu}, cpu_arithmetic {record['cpu_arithmetic']}")


def read(page: str) -> list[str] | None:
    """The phrases of the arithmetic a page's footer names, or None where it does not say (an
    older page, no job record yet, or some records that predate it: the page's bits are then
    not fully accounted for)."""
    if UNRECORDED in page:
        return None
    if found := ONE.search(page):
        return [found.group(1).removesuffix(".")]
    if found := SEVERAL.search(page):
        parts = re.split(r"; (?=\d+ × )", found.group(1).removesuffix("."))
        return list(dict.fromkeys(re.sub(r"^\d+ × ", "", part) for part in parts))
    return None


def key(phrase: str) -> tuple:
    """What decides the bits of a record's phrase (the module's docstring); a phrase this
    module cannot read is its own key."""
    found = PHRASE.match(phrase)
    if found is None:
        return (phrase,)
    mode = found["mode"]
    kind = "reproducible" if mode.startswith("reproducible:") else "native" if mode.startswith("native") else mode
    common = (found["cpu"], kind, frozenset(PIN.findall(mode)), found["torch"], found["mkl"], found["onednn"],
              found["threads"], found["gpu"])
    return common if kind == "reproducible" else (found["aten"], *common)


def same(ours: list[str] | None, theirs: list[str] | None) -> bool:
    """Whether two pages' footers name the same arithmetic (both recorded, the same keys)."""
    return ours is not None and theirs is not None and {key(p) for p in ours} == {key(p) for p in theirs}
