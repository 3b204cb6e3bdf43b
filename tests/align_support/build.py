"""Compilers for the alignment kernel that only the tests use (CuPy compiles it at run time).

- `compile_ptx(arch)`: NVRTC from the `cuda-bindings` + `nvidia-cuda-nvrtc-cu12` wheels of the
  `test` extra; it needs no GPU, so CI proves that the kernel compiles for sm_80 and sm_90.
- `register_counts(arch)`: the same compiler to machine code (a cubin), and the registers a
  thread of each kernel takes, read from the cubin: what decides whether a launch of 1,024
  threads fits the SM's 65,536 registers at all (a launch that does not fails on the GPU).
- `compile_shared_library(source, name)`: g++ builds C++ text into a shared library, cached
  by content hash under $MASKBENCH_BUILD_DIR (default ~/.cache/maskbench/align); host.py uses
  it to run the kernel's arithmetic on the CPU.
"""

import hashlib
import os
import shutil
import struct
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
    return _compile(arch, "compute_" + arch.removeprefix("sm_"), "PTX").rstrip(b"\x00").decode()


def register_counts(arch: str) -> dict[str, int]:
    """{kernel: registers per thread} of the kernel compiled to a cubin for `arch` ("sm_90")."""
    return _cubin_register_counts(_compile(arch, arch, "CUBIN"))


def _cubin_register_counts(elf: bytes) -> dict[str, int]:
    """The EIATTR_REGCOUNT entries (attribute 0x2f) of a cubin's .nv.info section, each naming
    its kernel by an index into the symbol table (ELF64: section headers at e_shoff, 24-byte
    symbols whose names lie in the string table the symbol table links to)."""
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    entry_size, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * entry_size) for i in range(count)]

    def string(table, offset):
        start = sections[table][4] + offset
        return elf[start:elf.index(b"\0", start)].decode()

    by_name = {string(names_index, s[0]): s for s in sections}
    symtab = by_name[".symtab"]
    symbols = [string(symtab[6], struct.unpack_from("<I", elf, symtab[4] + i)[0])
               for i in range(0, symtab[5], 24)]
    info = by_name[".nv.info"]
    data = elf[info[4]:info[4] + info[5]]
    counts, at = {}, 0
    while at < len(data):
        form, attribute, size = struct.unpack_from("<BBH", data, at)
        if form != 4:                                     # only sized entries carry a symbol and a value
            raise ValueError(f"unexpected .nv.info entry form {form} at byte {at}")
        if attribute == 0x2F:
            symbol, registers = struct.unpack_from("<II", data, at + 4)
            counts[symbols[symbol]] = registers
        at += 4 + size
    return counts


def _compile(arch: str, target: str, output: str) -> bytes:
    """NVRTC's PTX or CUBIN (`output`) of the kernel for --gpu-architecture=`target`."""
    from cuda.bindings import nvrtc  # the cuda-bindings wheel; finds the nvidia-cuda-nvrtc wheel

    def check(result, program=None):
        error = result[0]
        if error != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = _nvrtc_log(nvrtc, program) if program is not None else ""
            raise RuntimeError(f"NVRTC failed for {arch}: {error}\n{log}")
        return result[1:]

    (program,) = check(nvrtc.nvrtcCreateProgram(kernel_source().encode(), b"dag.cu", 0, [], []))
    try:
        options = [f"--gpu-architecture={target}".encode(), b"--std=c++17"]
        check(nvrtc.nvrtcCompileProgram(program, len(options), options), program)
        (size,) = check(getattr(nvrtc, f"nvrtcGet{output}Size")(program))
        code = b" " * size
        check(getattr(nvrtc, f"nvrtcGet{output}")(program, code))
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return code


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
