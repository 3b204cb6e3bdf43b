"""The stages' files. Output is atomic: every stage writes to a temporary sibling and renames it
into place, so a killed job never leaves a half-written file that a later stage would trust.
Input that cannot be parsed is refused naming the file and the stage job that rebuilds it
(`reading`, `damaged`), from the outputs `maskbench.paths` declares for each stage."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path

from maskbench import paths


# a write stopped by the disk filling up (ENOSPC) or by the process's file-size limit (EFBIG,
# `ulimit -f`); Python ignores SIGXFSZ, so the limit reaches a write as EFBIG
OUT_OF_SPACE = (errno.ENOSPC, errno.EFBIG)


class DiskFull(OSError):
    """A write ran out of space or past the file-size limit; what was at the path before is still there."""


class ShortWrite(OSError):
    """A write of `requested` bytes that stopped after `written` (OutputFile); `filename` is the
    file written."""

    def __init__(self, cause: OSError, filename: str, written: int, requested: int):
        super().__init__(cause.errno, cause.strerror, filename)
        self.written, self.requested = written, requested


class OutsideFolder(ValueError):
    """A path named in params.yaml would be written outside the folder it belongs in."""


def inside(folder: Path | str, name: str, key: str) -> Path:
    """`folder / name`, once it is certain that writing there writes inside `folder`: `name`
    comes from params.yaml (a file name, a split), and a shared params.yaml must not be able to
    overwrite a user's files with `..`, an absolute path, or a name that is a link (or passes
    through one) leading out of `folder`. Both are resolved, so a `folder` that is itself a link
    (data/ on a scratch disk) is fine. `key` is where params.yaml sets `name`, for the message."""
    root = Path(folder).resolve()
    target = (root / name).resolve()
    if target == root or not target.is_relative_to(root):
        raise OutsideFolder(f"{key}: {name!r} would be written at {target}, outside its folder {folder}; expected a "
                            "file name inside it (no '/', no '..', not a link that leads out of it)")
    return Path(folder) / name


@contextlib.contextmanager
def atomic_path(path: Path | str, is_dir: bool = False):
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename. A
    write stopped by a full disk (ENOSPC) or the file-size limit (EFBIG) is raised as DiskFull
    naming the file (inside `path`, for a directory) and, from an OutputFile, how many of its
    bytes were written: the libraries that write report it otherwise as a bare error about file
    positions (torch.save) or byte counts (numpy's tofile)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    target = tmp if is_dir else tmp / path.name
    try:
        try:
            yield target
        except OSError as exc:
            if exc.errno not in OUT_OF_SPACE or isinstance(exc, DiskFull):
                raise
            raise _disk_full(_final_name(exc.filename, target, path) if is_dir else path, exc) from exc
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


def _final_name(written: str | None, target: Path, path: Path) -> Path:
    """Where the file `written` inside the temporary directory `target` was to land under `path`."""
    try:
        return path / Path(written).relative_to(target)
    except (TypeError, ValueError):
        return path


def _disk_full(path: Path, exc: OSError) -> DiskFull:
    counted = f"{exc.written} of {exc.requested} bytes written: " if isinstance(exc, ShortWrite) else ""
    return DiskFull(exc.errno, f"disk full or file-size limit at {path} ({counted}{exc.strerror}): free space on its "
                               "disk, or raise the file-size limit (`ulimit -f`), and re-run; nothing was "
                               f"half-written, the last complete {path.name} (if any) is kept")


class OutputFile(io.FileIO):
    """A file opened for writing that keeps the OSError a write raised (`error`): torch.save
    turns a failed write into a RuntimeError ("unexpected pos ...") that names no cause, and a
    full disk must be named as such. Writes go through `os.write`, all of `data` each time; one
    stopped by a full disk or the file-size limit raises ShortWrite, with the bytes it wrote."""

    error: OSError | None = None

    def __init__(self, path: Path | str):
        super().__init__(path, "w")

    def write(self, data) -> int:
        view, written = memoryview(data).cast("B"), 0
        try:
            while written < len(view):
                written += os.write(self.fileno(), view[written:])
        except OSError as exc:
            self.error = ShortWrite(exc, self.name, written, len(view)) if exc.errno in OUT_OF_SPACE else exc
            raise self.error from exc
        return written


def save_torch(obj, path: Path | str) -> None:
    """`torch.save(obj)` to `path`, atomically; a full disk is raised as DiskFull naming `path`
    (torch reports it as a file position), and the file that was there is kept."""
    import torch

    with atomic_path(path) as tmp, OutputFile(tmp) as fh:
        try:
            torch.save(obj, fh)
        except RuntimeError:
            if fh.error is not None:  # the write's own error, which torch swallowed
                raise fh.error from None
            raise


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
    """The records of a JSON-lines file one at a time (hub dumps can be large). A line that is
    not JSON is named by its number in the file (json's own message says "line 1" of the line)."""
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if line.strip():
                try:  # without its line break, which json would count as the error's place
                    yield json.loads(line.rstrip("\r\n"))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path} line {number}: not JSON ({exc.msg}: column {exc.colno})") from None


def read_jsonl(path: Path | str) -> list[dict]:
    return list(iter_jsonl(path))


def job_command(stage: str, wildcards: dict) -> str:
    """The shell command of one stage job, its wildcards in the order given (without `--log`:
    the CLI logs to the stage's log by default)."""
    return " ".join(["maskbench", stage, *(f"--{k} {v}" for k, v in wildcards.items())])


def way_out(path: str | Path) -> str:
    """How to rebuild `path`, for error messages about a damaged or missing file: delete it and
    re-run the stage job that writes it, or force that job in Snakemake. A file inside a directory
    output (one task split of `data/tasks/<task>`) is rebuilt by deleting the whole directory:
    neither Snakemake nor DVC looks inside a directory output, so deleting the file alone re-runs
    nothing. Snakemake is told with `--forcerun <rule>` after the output as target: a job whose
    other outputs are in place (a table's markdown beside its deleted figures) reads to it as
    "Nothing to be done" otherwise."""
    found = _rebuild(path)
    if found is None:
        return "replace it"
    output, inside, rerun = found
    return f"{f'delete the whole directory (`rm -r {output}`)' if inside else 'delete it'} and {rerun}"


def _rebuild(path: str | Path) -> tuple[str, bool, str] | None:
    """The output `path` is (or is inside), whether inside, and how to re-run its job."""
    text = Path(path).as_posix()
    # fewest wildcards first: a fixed path (reports/index.md, the index's) before a pattern that
    # also matches it (reports/{table}.md, a report table's)
    declared = [*paths.OUTPUTS.items(), *paths.KEPT.items()]
    outputs = sorted(((stage, pattern) for stage, patterns in declared for pattern in patterns.values()),
                     key=lambda output: output[1].count("{"))
    for stage, pattern in outputs:
        regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(pattern))
        match = re.search(f"(^|/){regex}(/|$)", text)
        if match:  # the pattern names the wildcards in the order the stage's command takes them
            command = job_command(stage, match.groupdict())
            inside = pattern in paths.DIRECTORIES and match.end() < len(text)
            output = text[:match.end()].rstrip("/")
            # a kept output's job has a rule of its own (workflow/rules/finetune.smk): forced by its file
            forced = output if pattern in paths.KEPT.get(stage, {}).values() else stage
            rerun = f"re-run `{command}` (in the workflow: `snakemake --cores all {output} --forcerun {forced}`)"
            return output, inside, rerun
    return None


class DamagedFile(RuntimeError):
    """A file a stage reads exists but cannot be parsed (truncated, corrupt), or is missing from
    a directory output that exists."""


def damaged(path: str | Path, problem: str) -> DamagedFile:
    """The error for `path` with `problem`, naming the way to rebuild it."""
    return DamagedFile(f"{path}: {problem}; {way_out(path)}")


def _parse_errors() -> tuple[type[Exception], ...]:
    """What loading a damaged file raises: the builtin errors of parsers (JSON, zip, pickle)
    and safetensors' own (a truncated `model.safetensors`), which derives from none of them."""
    from safetensors import SafetensorError

    return ValueError, RuntimeError, OSError, EOFError, SafetensorError


@contextlib.contextmanager
def reading(path: str | Path):
    """Turn a parse failure while loading `path` into an error that names it and the stage
    job that rebuilds it (a bare JSONDecodeError or SafetensorError names neither)."""
    try:
        yield
    except _parse_errors() as exc:
        if isinstance(exc, (FileNotFoundError, DamagedFile)):
            raise
        # Missing or half-written: perhaps being replaced by a build running here now, which the
        # workspace lock (maskbench.workspace) refuses, but a reader cannot tell; so no "delete it".
        found = _rebuild(path)
        raise DamagedFile(f"{path}: cannot be read ({type(exc).__name__}: {str(exc)[:300]}): missing or half-written. "
                          "If a build is running in this workspace, wait for it to end; if none is, "
                          f"{found[2] if found else 'replace it'}") from exc
