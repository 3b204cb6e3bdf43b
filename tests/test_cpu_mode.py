"""The reproducible CPU mode (maskbench.cpu_mode): what it pins, where it cannot hold, and the
proof that it works: `maskbench pretrain` started on the code paths another CPU would take
trains bit-identical weights in the mode and different ones without it."""

from __future__ import annotations

import csv
import hashlib
import os
import subprocess
import sys

import pytest
import yaml

from maskbench import cpu_mode
from tests.helpers import pretrain_workdir


@pytest.fixture
def clean_env(monkeypatch):
    """No pin and no workflow thread count in the environment (as on a fresh shell), and `apply`'s
    record put back after."""
    for name in (*cpu_mode.PINS, *cpu_mode.WORKFLOW_THREADS):
        monkeypatch.setenv(name, "")  # so that what `apply` sets is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setattr(cpu_mode, "_status", cpu_mode._status)


def test_native_leaves_the_libraries_alone(clean_env, monkeypatch):
    assert cpu_mode.apply("native").startswith("native")
    assert not any(name in os.environ for name in cpu_mode.PINS)
    monkeypatch.setenv("MKL_CBWR", "AUTO")  # set by the user's shell: said, as it decides MKL's path
    assert cpu_mode.apply("native").endswith("but where the environment sets it (MKL_CBWR=AUTO)")


def test_a_thread_count_the_workflow_set_is_not_reported_as_the_users_pin(clean_env, monkeypatch):
    for name in cpu_mode.WORKFLOW_THREADS:  # as Snakemake starts every job's shell
        monkeypatch.setenv(name, "1")
    said = cpu_mode.apply("native")
    assert "environment sets" not in said
    assert said.endswith("(OPENBLAS_NUM_THREADS=1, as Snakemake sets it for every job)")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX512")  # the user's pin beside the workflow's count: theirs
    assert "but where the environment sets it (MKL_ENABLE_INSTRUCTIONS=AVX512);" in cpu_mode.apply("native")
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS")
    monkeypatch.setenv("GOTO_NUM_THREADS", "2")  # not the workflow's one value for all: the user's setting
    assert cpu_mode.apply("native").endswith("but where the environment sets it (OPENBLAS_NUM_THREADS=1)")


def test_snakemake_starts_a_job_as_the_workflow_detection_expects(tmp_path):
    """The detection above against the tool itself: a job of a Snakefile with `threads: 1`."""
    (tmp_path / "Snakefile").write_text(
        f"rule said:\n    output: 'said.txt'\n    threads: 1\n    shell: \"{sys.executable} -c "
        "'from maskbench import cpu_mode; print(cpu_mode.apply(\\\"native\\\"))' > {output}\"\n")
    env = {k: v for k, v in os.environ.items() if k not in (*cpu_mode.PINS, *cpu_mode.WORKFLOW_THREADS)}
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--quiet", "all"], cwd=tmp_path, env=env,
                   check=True, capture_output=True)
    assert (tmp_path / "said.txt").read_text().strip().endswith("(OPENBLAS_NUM_THREADS=1, as Snakemake sets it for "
                                                                "every job)")


def test_reproducible_pins_every_path_for_the_processes_it_starts(clean_env, monkeypatch):
    monkeypatch.setattr(cpu_mode, "READERS", ())  # as in the CLI, which applies it before importing torch or numpy
    said = cpu_mode.apply("reproducible")
    assert {k: os.environ[k] for k in cpu_mode.PINS} == cpu_mode.PINS
    assert "MKL_ENABLE_INSTRUCTIONS=AVX2" in said and all(f"{k}={v}" in said for k, v in cpu_mode.PINS.items())
    out = subprocess.run([sys.executable, "-c",
                          "import os; print(os.environ['MKL_CBWR'], os.environ['ATEN_CPU_CAPABILITY'])"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["COMPATIBLE", "avx2"]


def test_a_process_that_imported_torch_first_is_told_the_mode_does_not_hold(clean_env):
    import torch  # noqa: F401  (the test process has it; the CLI applies the mode before)

    assert "NOT in force" in cpu_mode.apply("reproducible")
    assert "NOT in force" in cpu_mode.status()
    assert not any(name in os.environ for name in cpu_mode.PINS)  # nothing left for later tests' processes


def test_a_process_started_pinned_keeps_the_mode_though_torch_is_imported(clean_env, monkeypatch):
    import torch  # noqa: F401

    for name, value in cpu_mode.PINS.items():
        monkeypatch.setenv(name, value)
    assert cpu_mode.apply("reproducible").startswith("reproducible: ATEN_CPU_CAPABILITY=avx2")


def test_an_x86_cpu_without_avx2_stops_with_the_setting_to_change(clean_env, monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 sse4_1 sse4_2 avx\n")
    assert not cpu_mode.has_avx2(cpuinfo)
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma\n")
    assert cpu_mode.has_avx2(cpuinfo)
    monkeypatch.setattr(cpu_mode, "has_avx2", lambda: False)
    monkeypatch.setattr(cpu_mode.platform, "machine", lambda: "x86_64")
    with pytest.raises(cpu_mode.CpuModeError, match="cpu_arithmetic: native"):
        cpu_mode.apply("reproducible")


def test_other_architectures_run_native_and_say_so(clean_env, monkeypatch):
    monkeypatch.setattr(cpu_mode.platform, "machine", lambda: "arm64")
    assert "not applicable on arm64" in cpu_mode.apply("reproducible")
    assert not any(name in os.environ for name in cpu_mode.PINS)


def test_an_unknown_mode_is_an_error_naming_the_choices():
    with pytest.raises(cpu_mode.CpuModeError, match="reproducible"):
        cpu_mode.apply("fast")


def test_the_schema_refuses_an_unknown_mode(raw_params):
    from maskbench.config import ParamsError, read_yaml, schema_path, validate

    with pytest.raises(ParamsError, match="cpu_arithmetic"):
        validate({**raw_params, "cpu_arithmetic": "fast"}, read_yaml(schema_path()))


# The paths this machine takes by itself, and the paths another x86-64 CPU would take: ATen's
# AVX-512 kernels where this CPU has them (else its portable ones), MKL's own branch for the CPU,
# oneDNN's SSE4.1 ISA.
HERE = {"ATEN_CPU_CAPABILITY": "avx2"}
ELSEWHERE = {"MKL_CBWR": "AUTO", "ONEDNN_MAX_CPU_ISA": "SSE41"}


def other_aten_path() -> str:
    capability = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                                capture_output=True, text=True, check=True).stdout.strip()
    return "avx512" if capability.startswith("AVX512") else "default"


def pretrained(tmp_path, tokenizer, name: str, mode: str, started_under: dict) -> tuple[str, list[str]]:
    """(sha256 of the trained weights, the training loss of every step) of a 10-step smoke MLM run by
    `maskbench pretrain` in mode `mode`, its process started with the variables `started_under`."""
    root = pretrain_workdir(tmp_path / name, tokenizer, steps=10, checkpoint_every=5, log_every=1)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["profiles"]["smoke"]["cpu_arithmetic"] = mode  # the smoke profile's own setting would win over the top's
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k not in cpu_mode.PINS} | started_under
    done = subprocess.run([sys.executable, "-m", "maskbench.cli", "pretrain", "--run", "mlm"], cwd=root, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    run = root / "runs/pretrain/mlm"
    with open(run / "log.csv") as fh:
        losses = [row["loss"] for row in csv.DictReader(fh)]
    return hashlib.sha256((run / "model/model.safetensors").read_bytes()).hexdigest(), losses


@pytest.mark.slow
def test_two_cpu_paths_train_the_same_bits_in_the_mode_and_different_ones_without(tmp_path, tiny_tokenizer):
    elsewhere = {"ATEN_CPU_CAPABILITY": other_aten_path(), **ELSEWHERE}
    native = [pretrained(tmp_path, tiny_tokenizer, f"native-{i}", "native", env)
              for i, env in enumerate((HERE, elsewhere))]
    pinned = [pretrained(tmp_path, tiny_tokenizer, f"pinned-{i}", "reproducible", env)
              for i, env in enumerate((HERE, elsewhere))]
    assert native[0][0] != native[1][0], "the forced paths trained the same weights: the test proves nothing"
    assert pinned[0] == pinned[1]
