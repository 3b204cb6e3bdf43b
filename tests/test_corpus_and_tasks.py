"""Corpus reading/tokenization and task preparation on files in the real formats."""

from __future__ import annotations

import bz2
import json
import gzip

import numpy as np
import pandas as pd
import pytest

from maskbench.data.corpus import load_stream, read_wikitext, tokenize_corpus
from maskbench.data.tasks import prepare_task, read_rotten_tomatoes, split_rows


def write_wikitext(raw):
    raw.mkdir(parents=True, exist_ok=True)
    for split, titles in {"train": ["A", "B"], "valid": ["C"], "test": ["D"]}.items():
        lines = []
        for t in titles:
            lines += [" ", f" = {t} = ", " ", f" the cat sat on the mat in {t} . ", " = = Section = = ", " the dog ran . "]
        (raw / f"{split}.raw.gz").write_bytes(gzip.compress("\n".join(lines).encode()))


def test_wikitext_splits_articles_at_titles_not_sections(tmp_path):
    write_wikitext(tmp_path)
    docs, skipped = read_wikitext(tmp_path)
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


def write_rotten_tomatoes(raw, extra_rows=()):
    raw.mkdir(parents=True, exist_ok=True)
    rows = [("plot", "A long synopsis."), ("fresh", "Great fun."), ("rotten", "Dull."), ("fresh", ""),
            ("meh", "Unsure."), *[("fresh" if i % 2 else "rotten", f"snippet {i}") for i in range(40)], *extra_rows]
    frame = pd.DataFrame(rows, columns=["category", "text"]).assign(movie_name="m", has_plot_and_reviews=False)
    (raw / "rotten_tomatoes_corpus_full.csv.bz2").write_bytes(bz2.compress(frame.to_csv(index=False).encode()))


def test_rotten_tomatoes_counts_every_skipped_row(tmp_path):
    write_rotten_tomatoes(tmp_path)
    rows, skipped, names = read_rotten_tomatoes(tmp_path)
    assert names == ["rotten", "fresh"]
    assert len(rows) == 42
    assert skipped == {"plot_synopsis_not_a_review": 1, "empty_text": 1, "label_outside_set": 1}
    assert rows[0] == {"text": "Great fun.", "text_pair": None, "label": 1}


def test_missing_column_names_file_and_columns(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    frame = pd.DataFrame({"category": ["fresh"], "review": ["x"]})
    (tmp_path / "rotten_tomatoes_corpus_full.csv.bz2").write_bytes(bz2.compress(frame.to_csv(index=False).encode()))
    with pytest.raises(ValueError, match=r"rotten_tomatoes_corpus_full.csv.bz2: missing column\(s\) \['text'\]"):
        read_rotten_tomatoes(tmp_path)


def test_split_is_deterministic_disjoint_and_complete():
    rows = [{"text": str(i), "text_pair": None, "label": i % 2} for i in range(100)]
    a, b = split_rows(rows, 0.1, 0.2, seed=0), split_rows(rows, 0.1, 0.2, seed=0)
    assert a == b
    assert [len(a[s]) for s in ("train", "dev", "test")] == [70, 10, 20]
    texts = [{r["text"] for r in a[s]} for s in ("train", "dev", "test")]
    assert set.union(*texts) == {str(i) for i in range(100)} and sum(map(len, texts)) == 100
    # pinned: the same split on every machine (numpy PCG64)
    assert [r["text"] for r in a["dev"]] == [str(i) for i in sorted(np.random.Generator(np.random.PCG64(0)).permutation(100)[:10])]


def test_prepare_task_writes_splits_and_card(tmp_path, raw_params):
    from maskbench.config import validate, read_yaml, schema_path
    from tests.conftest import REPO

    config = validate(raw_params, read_yaml(schema_path(REPO / "params.yaml")))
    write_rotten_tomatoes(tmp_path / "raw")
    card = prepare_task(config, "rotten_tomatoes", tmp_path / "raw", tmp_path / "task", tmp_path / "card.json")
    assert sum(card["rows"].values()) == 42 and card["skipped"]["plot_synopsis_not_a_review"] == 1
    assert sorted(p.name for p in (tmp_path / "task").iterdir()) == ["dev.jsonl", "test.jsonl", "train.jsonl"]


def test_tokenizer_training_is_reproducible(tmp_path):
    """Same corpus, same tokenizer file: ids are renumbered canonically after training
    (the trainers number tokens in hash-map order, huggingface/tokenizers#1794)."""
    from maskbench.data.tokenizers import SPECIAL_TOKENS, train_wordpiece

    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcdefgh"), rng.integers(2, 7))) for _ in range(300)]
    texts = [" ".join(rng.choice(words, 12)) for _ in range(400)]
    files = [train_wordpiece(texts, 5000, 1, True, tmp_path / f"tok{i}") and (tmp_path / f"tok{i}/tokenizer.json")
             for i in range(4)]
    assert len({f.read_text() for f in files}) == 1
    vocab = json.loads(files[0].read_text())["model"]["vocab"]
    assert [t for t, i in sorted(vocab.items(), key=lambda kv: kv[1])][:5] == SPECIAL_TOKENS
