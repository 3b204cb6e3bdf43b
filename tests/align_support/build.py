"""Compilers for the alignment kernel that only the tests use (CuPy compiles it at run time).

- `compile_ptx(arch)`: NVRTC from the `cuda-bindings` + `nvidia-cuda-nvrtc-cu12` wheels of the
  `test` extra; it needs no GPU, so CI proves that the kernel compiles for sm_80 and sm_90.
- `compile_shared_library(source, name)`: g++ builds C++ text into a shared library, cached
  by content hash under $MASKBENCH_BUILD_DIR (default ~/.cache/maskbench/align); host.py uses
  it to run the kernel's arithmetic on the CPU.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from maskbench.align.cuda import kernel_source

HOST_CXXFLAGS = ["-O2", "-std=c++17", "-shared", "-fPIC", "-Wall", "-Werror"]


def compile_ptx(arch: str) -> str:
    """Compile the kernel to PTX for `arch` ("sm_80", "sm_90", ...) with NVRTC; return the PTX.

    Raises ImportError when the NVRTC wheel is missing and RuntimeError with NVRTC's log when
    the source does not compile.
    """
    from cuda.bindings import nvrtc  # the cuda-bindings wheel; finds the nvidia-cuda-nvrtc wheel

    def check(result, program=None):
        error = result[0]
        if error != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = _nvrtc_log(nvrtc, program) if program is not None else ""
            raise RuntimeError(f"NVRTC failed for {arch}: {error}\n{log}")
        return result[1:]

    compute = "compute_" + arch.removeprefix("sm_")
    (program,) = check(nvrtc.nvrtcCreateProgram(kernel_source().encode(), b"dag.cu", 0, [], []))
    try:
        options = [f"--gpu-architecture={compute}".encode(), b"--std=c++17"]
        check(nvrtc.nvrtcCompileProgram(program, len(options), options), program)
        (size,) = check(nvrtc.nvrtcGetPTXSize(program))
        ptx = b" " * size
        check(nvrtc.nvrtcGetPTX(program, ptx))
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return ptx.rstrip(b"\x00").decode()


def _nvrtc_log(nvrtc, program) -> str:
    _, size = nvrtc.nvrtcGetProgramLogSize(program)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(program, log)
    return log.rstrip(b"\x00").decode(errors="replace")


def build_dir() -> Path:
    default = Path.home() / ".cache" / "maskbench" / "align"
    return Path(os.environ.get("MASKBENCH_BUILD_DIR", default))


def compile_shared_library(source: str, name: str) -> Path:
    """Build C++ `source` into lib<name>-<hash>.so with g++, once per distinct source."""
    compiler = shutil.which("g++")
    if compiler is None:
        raise RuntimeError("g++ not found: the CPU build of the alignment kernel needs a C++ compiler")
    digest = hashlib.sha256((source + " ".join(HOST_CXXFLAGS)).encode()).hexdigest()[:16]
    target = build_dir() / f"lib{name}-{digest}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        cpp = Path(scratch) / f"{name}.cpp"
        cpp.write_text(source)
        built = Path(scratch) / target.name
        result = subprocess.run([compiler, *HOST_CXXFLAGS, str(cpp), "-o", str(built)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"g++ failed to build {name}:\n{result.stderr}")
        os.replace(built, target)  # atomic: parallel test workers never see half a library
    return target
