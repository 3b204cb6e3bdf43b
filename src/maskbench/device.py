"""The torch device a stage runs on, from params.yaml's `device` setting."""

from __future__ import annotations

import torch


def pick_device(name: str) -> torch.device:
    """`auto`: a GPU when there is one; `cuda` without one is an error, not a silent CPU run."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: cuda requested in params.yaml but no CUDA device is available")
    return torch.device(name)
