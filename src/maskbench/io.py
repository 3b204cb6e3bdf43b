"""Atomic file output: every stage writes to a temporary sibling and renames it into place,
so a killed job never leaves a half-written file that a later stage would trust."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: Path | str, is_dir: bool = False):
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    target = tmp if is_dir else tmp / path.name
    try:
        yield target
        _normal_permissions(target)
        if path.is_dir() and not path.is_symlink():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            path.rename(old)
            target.rename(path)
            shutil.rmtree(old)
        else:
            os.replace(target, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _normal_permissions(path: Path) -> None:
    """The modes the process's umask gives new files and directories: the temporary directory
    is private (0700), and some writers make private files (safetensors: 0600), which on a
    shared cluster would keep everyone else out of the outputs."""
    umask = os.umask(0)
    os.umask(umask)
    for item in [path, *(path.rglob("*") if path.is_dir() else [])]:
        if not item.is_symlink():
            item.chmod((0o777 if item.is_dir() else 0o666) & ~umask)


def write_text(path: Path | str, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: Path | str, data) -> None:
    """Valid JSON always: an undefined number (NaN, ±inf) is written as null."""
    write_text(path, json.dumps(_finite(data), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")


def _finite(data):
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def read_json(path: Path | str):
    return json.loads(Path(path).read_text())


def sha256_file(path: Path | str, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def iter_jsonl(path: Path | str):
    """The records of a JSON-lines file one at a time (hub dumps can be large)."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def read_jsonl(path: Path | str) -> list[dict]:
    return list(iter_jsonl(path))
