"""Where a result came from: the git commit of the code that made it (tagged on MLflow runs,
printed under every report), and the arithmetic that computed it (`arithmetic`: recorded in
every pretraining and fine-tuning metrics.json and summed up in every table's footer), so two
builds whose numbers differ can be told apart at a glance."""

from __future__ import annotations

import platform
import re
import subprocess
from pathlib import Path


def git_commit(root: Path | None = None) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def arithmetic(device=None) -> dict:
    """What decided every rounding of this process's numbers: the CPU and the code path ATen
    took on it, the torch, MKL and oneDNN builds, the thread count and the `cpu_arithmetic` mode
    (maskbench.cpu_mode), and on a CUDA `device` the GPU, CUDA and cuDNN."""
    import torch

    from maskbench import cpu_mode

    build = torch.__config__.show()
    record = {"cpu": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "torch": torch.__version__,
              "mkl": _found(r"Math Kernel Library Version ([\d.]+)", build),
              "onednn": _found(r"MKL-DNN v(\S+)", build),
              "threads": torch.get_num_threads(), "cpu_arithmetic": cpu_mode.status()}
    if device is not None and torch.device(device).type == "cuda":
        record |= {"gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda,
                   "cudnn": torch.backends.cudnn.version()}
    return record


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (Linux's /proc/cpuinfo; elsewhere what `platform` knows)."""
    try:
        found = _found(r"^model name\s*:\s*(.+)$", cpuinfo.read_text())
    except OSError:
        found = None
    return found or platform.processor() or platform.machine()


def _found(pattern: str, text: str) -> str | None:
    match = re.search(pattern, text, re.MULTILINE)
    return match.group(1).strip() if match else None
