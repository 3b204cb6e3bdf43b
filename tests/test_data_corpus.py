"""Corpora (`maskbench.data.corpus`): WikiText split into articles at titles, token streams that
separate documents and splits, SMILES CSV corpora with a held-out valid split. Streaming, and a
corpus of two hub datasets read from parquet: tests/test_data_streaming.py."""

from __future__ import annotations

import gzip
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from maskbench.data.corpus import (load_stream, read_corpus, read_smiles_csv, read_wikitext, tokenize_corpus,
                                   unigram_loss)
from maskbench.io import read_json
from maskbench.stages import STAGES
from tests.samples import write_wikitext


def corpus_raws(config: dict, modality: str, root: Path) -> list[Path]:
    """The raw directories the tokenizer stage reads for `modality`, under `root`."""
    return [root / p for p in STAGES["tokenizer"].inputs(config, {"modality": modality})["raw"]]


def test_wikitext_splits_articles_at_titles_not_sections(tmp_path):
    write_wikitext(tmp_path)
    docs = {split: list(stream(Counter())) for split, stream in read_wikitext(tmp_path).items()}
    assert [len(docs[s]) for s in ("train", "valid", "test")] == [2, 1, 1]
    assert docs["train"][0].startswith("= A =") and "= = Section = =" in docs["train"][0]


def test_token_streams_separate_documents_and_splits(tmp_path, tiny_tokenizer):
    docs = {"train": ["the cat sat", "a dog ran"], "valid": ["the bird sang"], "test": ["the park"]}
    meta = tokenize_corpus(docs, tiny_tokenizer, tmp_path / "tokens")
    train = load_stream(tmp_path / "tokens", "train")
    assert meta["splits"]["train"]["documents"] == 2
    assert list(train).count(tiny_tokenizer.sep_token_id) == 2 and train[-1] == tiny_tokenizer.sep_token_id
    assert tiny_tokenizer.decode(load_stream(tmp_path / "tokens", "valid")[:-1]) == "the bird sang"

    batched = tokenize_corpus(docs, tiny_tokenizer, tmp_path / "one_by_one", batch=1)  # written batch by batch
    assert batched == meta and list(load_stream(tmp_path / "one_by_one", "train")) == list(train)


def test_a_split_without_a_stream_is_refused_naming_the_streams(tmp_path, tiny_tokenizer):
    """The tokenize stage writes the streams a stage reads (STREAMS), not the test split."""
    tokenize_corpus({"train": ["the cat sat"], "valid": ["a dog ran"]}, tiny_tokenizer, tmp_path / "tokens")
    with pytest.raises(ValueError, match=r"no test stream; the tokenize stage writes \['train', 'valid'\]"):
        load_stream(tmp_path / "tokens", "test")


def test_unigram_loss_is_the_hand_computed_cross_entropy():
    """Vocabulary: 0 = [SEP] (special), 1, 2, 3. Train holds 1 1 1 2 (and 2 [SEP]); so with add-one
    smoothing over the 3 text tokens p(1) = 4/7, p(2) = 2/7, p(3) = 1/7. Valid holds 1 2 3 (and a
    [SEP]): its cross-entropy is -(ln 4/7 + ln 2/7 + ln 1/7) / 3; [SEP] counts nowhere."""
    train, valid = np.array([2, 3, 1, 0]), np.array([1, 1, 1, 1])
    expected = -(np.log(4 / 7) + np.log(2 / 7) + np.log(1 / 7)) / 3
    assert unigram_loss(train, valid, special_ids=[0]) == pytest.approx(expected)


def test_token_meta_and_card_record_the_unigram_loss(tmp_path, tiny_tokenizer):
    docs = {"train": ["the cat sat", "the cat ran"], "valid": ["the dog sat"]}
    assert tiny_tokenizer.tokenize("the cat sat the cat ran the dog") == "the cat sat the cat ran the dog".split()
    meta = tokenize_corpus(docs, tiny_tokenizer, tmp_path / "tokens")
    text_vocabulary = len(tiny_tokenizer) - len(set(tiny_tokenizer.all_special_ids))
    p = {w: (c + 1) / (6 + text_vocabulary) for w, c in {"the": 2, "sat": 1, "dog": 0}.items()}
    assert meta["unigram_loss"] == pytest.approx(-np.mean(np.log(list(p.values()))))
    assert read_json(tmp_path / "tokens/meta.json")["unigram_loss"] == meta["unigram_loss"]
    train_counts = np.load(tmp_path / "tokens/train_counts.npy")  # what pretraining starts its LM head at
    vocab = tiny_tokenizer.get_vocab()
    assert [train_counts[vocab[w]] for w in ("the", "cat", "sat", "ran", "dog")] == [2, 2, 1, 1, 0]
    assert train_counts[tiny_tokenizer.sep_token_id] == 2 and train_counts.sum() == 8


def test_smiles_csv_corpus_holds_out_valid_and_counts_bad_smiles(config, tmp_path):
    raw = tmp_path / "data/raw/moses"
    raw.mkdir(parents=True)
    train = ["CCO", "c1ccccc1", "C1CC(", "", *[f"C{'C' * i}O" for i in range(96)]]
    (raw / "train.csv.gz").write_bytes(gzip.compress(("SMILES\n" + "\n".join(train) + "\n").encode()))
    (raw / "test.csv.gz").write_bytes(gzip.compress(b"SMILES\nCCN\n"))
    documents, card = read_corpus(config, "smiles", corpus_raws(config, "smiles", tmp_path))
    assert {split: len(d) for split, d in documents.items()} == {"train": 97, "valid": 1, "test": 1}
    assert card == {"moses": {"documents": {"train": 97, "valid": 1, "test": 1},
                              "skipped": {"empty_smiles": 1, "unparsable_smiles": 1}}}
    again = read_corpus(config, "smiles", corpus_raws(config, "smiles", tmp_path))[0]
    assert {s: list(d) for s, d in again.items()} == {s: list(d)
                                                      for s, d in documents.items()}  # the same draw every time


def test_rdkit_parses_a_smiles_file_once_and_a_rewritten_file_again(tmp_path, monkeypatch):
    """The later passes over a file (the tokenizer stage makes three) reuse the first pass's
    verdicts, skipping the same rows; a file written since is parsed anew."""
    from maskbench.data import corpus

    path = tmp_path / "train.csv"
    path.write_text("SMILES\nCCO\nC1CC(\n\nc1ccccc1\n")
    first = Counter()
    documents = list(read_smiles_csv(tmp_path)["train"](first))
    assert documents == ["CCO", "c1ccccc1"] and first == {"empty_smiles": 1, "unparsable_smiles": 1}

    def no_parse(*args, **kwargs):
        raise AssertionError("RDKit asked again")
    monkeypatch.setattr(corpus.Chem, "MolFromSmiles", no_parse)
    second = Counter()
    assert list(read_smiles_csv(tmp_path)["train"](second)) == documents and second == first

    path.write_text("SMILES\nCCN\nCCC\n")
    os.utime(path, ns=(1, 1))  # another time, as a rewrite leaves it
    monkeypatch.undo()
    assert list(read_smiles_csv(tmp_path)["train"](Counter())) == ["CCN", "CCC"]


def test_smiles_csv_without_smiles_column_is_named(tmp_path):
    (tmp_path / "train.csv").write_text("mol\nCCO\n")
    with pytest.raises(ValueError, match=r"train.csv: no SMILES column; columns found: \['mol'\]"):
        read_smiles_csv(tmp_path)
