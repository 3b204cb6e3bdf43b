"""A raw file in the wrong (or a truncated) compressed format stops every reader with an error that
names the file and the format its name promised, not a bare BadGzipFile / "Invalid data stream"."""

from __future__ import annotations

import gzip

import pandas as pd
import pytest

from maskbench.data.corpus import census, read_smiles_csv, read_wikitext
from maskbench.data.moleculenet import load_moleculenet
from maskbench.data.rawfiles import RawFileError, open_text
from maskbench.data.tasks import read_rotten_tomatoes
from tests.samples import write_wikitext

NOT_COMPRESSED = b"category,text\nfresh,plain text where compressed data belongs\n"


def test_rotten_tomatoes_that_is_not_bzip2(tmp_path):
    (tmp_path / "rotten_tomatoes_corpus_full.csv.bz2").write_bytes(NOT_COMPRESSED)
    with pytest.raises(RawFileError,
                       match=r"rotten_tomatoes_corpus_full\.csv\.bz2: cannot be read as bzip2-compressed"):
        read_rotten_tomatoes(tmp_path)


def test_wikitext_that_is_not_gzip(tmp_path):
    write_wikitext(tmp_path)
    (tmp_path / "valid.raw.gz").write_bytes(b" = Valid = \n plain text \n")
    with pytest.raises(RawFileError, match=r"valid\.raw\.gz: cannot be read as gzip-compressed UTF-8 text"):
        census(read_wikitext(tmp_path))


def test_truncated_gzip_smiles_csv(tmp_path):
    whole = gzip.compress(("SMILES\n" + "CCO\n" * 1000).encode())
    (tmp_path / "train.csv.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(RawFileError, match=r"train\.csv\.gz: cannot be read as gzip-compressed.*truncated"):
        census(read_smiles_csv(tmp_path))


def test_deepchem_csv_gz_that_is_not_gzip(tmp_path):
    path = tmp_path / "tox21.csv.gz"
    path.write_bytes(b"NR-AR,smiles\n1,CCO\n")
    with pytest.raises(RawFileError, match=r"tox21\.csv\.gz: cannot be read as gzip-compressed"):
        load_moleculenet("tox21", path)


def test_plain_file_that_is_not_utf8_text(tmp_path):
    path = tmp_path / "BBBP.csv"
    path.write_bytes(gzip.compress(b"num,name,p_np,smiles\n"))  # compressed, but named as plain CSV
    with pytest.raises(RawFileError, match=r"BBBP\.csv: cannot be read as UTF-8 text"):
        load_moleculenet("bbbp", path)


def test_byte_order_mark_is_dropped_and_readers_own_errors_pass_through(tmp_path):
    path = tmp_path / "x.csv.gz"
    path.write_bytes(gzip.compress("\ufeffsmiles,y\nCCO,1\n".encode()))
    with open_text(path, newline="") as fh:
        assert list(pd.read_csv(fh).columns) == ["smiles", "y"]
    with pytest.raises(KeyError, match="mine"), open_text(path):
        raise KeyError("mine")
    with pytest.raises(FileNotFoundError), open_text(tmp_path / "missing.csv.gz"):
        pass
