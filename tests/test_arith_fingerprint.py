"""benchmarks/arith_fingerprint.py, which finds where two CPUs' arithmetic parts: a fingerprint
repeats itself on one machine, tells the modes apart, and its comparison names the first entry
that differs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

SCRIPT = str(REPO / "benchmarks/arith_fingerprint.py")


def fingerprint(tmp_path, mode: str, folder: str):
    done = subprocess.run([sys.executable, SCRIPT, "--mode", mode, "--steps", "1", "--out", str(tmp_path / folder)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "src")}, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    return tmp_path / folder / done.stdout.split("/")[-1].strip()


def compare(a, b):
    return subprocess.run([sys.executable, SCRIPT, "--compare", str(a), str(b)], capture_output=True, text=True)


def test_the_comparison_names_the_first_entry_that_differs(tmp_path):
    trace = [["init w", "aa"], ["step 0 forward encoder.blocks.0.ln_1[0]", "bb"], ["step 0 loss", "cc"]]
    one = {"arithmetic": {"cpu": "A"}, "primitives": {"mm": "1", "gelu": "2"}, "trace": trace}
    two = {"arithmetic": {"cpu": "B"}, "primitives": {"mm": "1", "gelu": "3"},
           "trace": [trace[0], [trace[1][0], "xx"], [trace[2][0], "yy"]]}
    (tmp_path / "a.json").write_text(json.dumps(one))
    (tmp_path / "b.json").write_text(json.dumps(two))
    (tmp_path / "c.json").write_text(json.dumps(one | {"arithmetic": {"cpu": "C"}}))
    differs = compare(tmp_path / "a.json", tmp_path / "b.json")
    assert differs.returncode == 1
    assert "primitives that differ: gelu\n" in differs.stdout
    assert "first trace entry that differs: step 0 forward encoder.blocks.0.ln_1[0]" in differs.stdout
    same = compare(tmp_path / "a.json", tmp_path / "c.json")
    assert same.returncode == 0 and "first trace entry that differs: none" in same.stdout


@pytest.mark.slow
def test_a_fingerprint_repeats_on_one_machine_and_tells_the_modes_apart(tmp_path):
    first, again = fingerprint(tmp_path, "reproducible", "one"), fingerprint(tmp_path, "reproducible", "two")
    assert compare(first, again).returncode == 0
    found = json.loads(first.read_text())
    assert found["arithmetic"]["cpu_arithmetic"].startswith("reproducible: ")
    assert any(name.startswith("step 0 after AdamW") for name, _ in found["trace"])
    # MKL's automatic branch is not its COMPATIBLE one on any CPU measured
    native = fingerprint(tmp_path, "native", "three")
    assert compare(first, native).returncode == 1
