"""The download stage's data card: provenance, hashes, bytes and per-file row counts, counted
through the files' compression on small files in the real layouts."""

from __future__ import annotations

import bz2
import gzip
import json
import zipfile

import pytest

from maskbench.data.download import count_rows, download
from maskbench.data.rawfiles import RawFileError
from tests.samples import GLUE_FILES, SQUAD_V2


def local_dataset(path, fmt, **fields) -> dict:
    """A params `datasets` entry for a local copy at `path`."""
    return {"datasets": {"d": {"role": "task", "modality": "text", "format": fmt,
                               "source": {"kind": "local", "path": str(path)}, **fields}}}


def fetch_card(tmp_path, config) -> dict:
    return download(config, "d", tmp_path / "raw", tmp_path / "card.json", tmp_path / "cache")


def test_card_counts_rows_of_every_file_kind(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    # a quoted review spanning two lines is one record; a blank last line is none
    (src / "reviews.csv.bz2").write_bytes(bz2.compress(b'category,text\nfresh,"Great\nfun."\nrotten,Dull.\n\n'))
    (src / "train.csv.gz").write_bytes(gzip.compress(("SMILES\n" + "CCO\n" * 2500).encode()))
    (src / "train.raw.gz").write_bytes(gzip.compress(b" \n = A = \n text . \n"))
    (src / "dev.jsonl").write_text('{"question": "q"}\n{"question": "r"}\n')
    (src / "snippets.txt").write_text("1\tgood\n\n2\tbad\n")
    (src / "dev-v2.0.json").write_text(json.dumps(SQUAD_V2))
    (src / "dev.tsv").write_text("\n".join(GLUE_FILES["MRPC"]["dev.tsv"]) + "\n", encoding="utf-8")  # starts with a BOM
    with zipfile.ZipFile(src / "extra.zip", "w") as zf:
        zf.writestr("a.csv", "x\n1\n")

    card = fetch_card(tmp_path, local_dataset(src, "rotten_tomatoes"))
    assert {name: entry["count"] for name, entry in card["rows"].items()} == {
        "reviews.csv.bz2": 2, "train.csv.gz": 2500, "train.raw.gz": 2, "dev.jsonl": 2, "snippets.txt": 2,
        "dev-v2.0.json": 4, "dev.tsv": 1,
    }  # fmt: skip
    assert card["rows"]["train.csv.gz"]["unit"] == "CSV records after the header row"
    assert card["rows"]["dev-v2.0.json"]["unit"] == "SQuAD questions"
    assert "extra.zip" in card["bytes"] and "extra.zip" in card["source"]["files"]
    assert json.loads((tmp_path / "card.json").read_text()) == card


def test_cola_files_without_header_count_their_first_line(tmp_path):
    src = tmp_path / "CoLA"
    src.mkdir()
    for name, lines in GLUE_FILES["CoLA"].items():
        (src / name).write_text("\n".join(lines) + "\n")
    rows = fetch_card(tmp_path, local_dataset(src, "glue_tsv", subset="cola"))["rows"]
    assert {name: entry["count"] for name, entry in rows.items()} == {"train.tsv": 2, "dev.tsv": 1, "test.tsv": 1}
    assert rows["train.tsv"]["unit"] == "tab-separated lines"
    assert rows["test.tsv"]["unit"].endswith("after the header row")


def test_vader_snippets_are_a_table_named_txt(tmp_path):
    src = tmp_path / "vader"
    src.mkdir()
    (src / "movieReviewSnippets_GroundTruth.txt").write_text("id\tsentiment\ttext\n1\t1.0\tgood\n2\t-1.0\tbad\n")
    rows = fetch_card(tmp_path, local_dataset(src, "vader"))["rows"]
    assert rows == {"movieReviewSnippets_GroundTruth.txt": {"count": 2,
                                                            "unit": "tab-separated lines after the header row"}}


def test_a_file_in_the_wrong_format_stops_the_download_naming_it(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.csv.gz").write_bytes(b"SMILES\nCCO\n")
    with pytest.raises(RawFileError, match=r"train\.csv\.gz: cannot be read as gzip-compressed"):
        fetch_card(tmp_path, local_dataset(src, "smiles_csv"))
    assert not (tmp_path / "raw").exists() and not (tmp_path / "card.json").exists()


def test_json_that_is_not_squad_is_named(tmp_path):
    (tmp_path / "info.json").write_text('{"version": 1}')
    with pytest.raises(RawFileError, match=r"info\.json: expected SQuAD JSON .*KeyError: 'data'"):
        count_rows(tmp_path, {}, set())
