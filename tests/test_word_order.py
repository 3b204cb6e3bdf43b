"""The generated word-order task (maskbench.data.word_order): sentences cut from WikiText raw
text, rows balanced and seeded, a shuffled row the same words as a real sentence in another
order with its first and last word in place (its settings' checks: tests/test_config.py)."""

from __future__ import annotations

import gzip
from collections import Counter

import numpy as np
import pytest

from maskbench.data.tasks import prepare_task
from maskbench.data.word_order import shuffle_interior, wikitext_sentences, word_order_rows
from maskbench.io import read_jsonl

RAW = [
    " ",
    " = Robert Boulter = ",
    " ",
    " Robert Boulter is an English film , television and theatre actor . He had a guest role . ",
    " = = Career = = ",
    " In 2006 , Boulter starred alongside Whishaw in the play Citizenship written by Mark Ravenhill . ",
    " la la la la . ",
]


def test_sentences_are_cut_at_full_stops_with_titles_and_odd_lengths_counted():
    sentences, skipped = wikitext_sentences(RAW, min_words=4, max_words=12)
    assert sentences == [["Robert", "Boulter", "is", "an", "English", "film", ",", "television", "and",
                          "theatre", "actor"],
                         ["He", "had", "a", "guest", "role"]]
    assert skipped == Counter({"sentence_too_long": 1, "interior_words_all_equal": 1})
    _, skipped = wikitext_sentences(RAW, min_words=6, max_words=30)
    assert skipped == Counter({"sentence_too_short": 2})  # "He had a guest role" and "la la la la"


def test_shuffled_interior_keeps_the_ends_and_the_words_and_always_changes_the_order():
    rng = np.random.Generator(np.random.PCG64(0))
    words = "The cat sat on the mat".split()
    for _ in range(50):
        shuffled = shuffle_interior(words, rng)
        assert shuffled[0] == "The" and shuffled[-1] == "mat"
        assert sorted(shuffled) == sorted(words) and shuffled != words
    with pytest.raises(ValueError, match="interior words are all the same"):
        shuffle_interior("a b b z".split(), rng)


def test_rows_are_balanced_seeded_and_each_sentence_is_used_once():
    sentences = [[f"w{i}", *(f"x{i}_{j}" for j in range(6)), f"end{i}"] for i in range(40)]
    rows = word_order_rows(sentences, examples=21, seed=3, where="test.raw.gz")
    assert rows == word_order_rows(sentences, examples=21, seed=3, where="test.raw.gz")
    assert rows != word_order_rows(sentences, examples=21, seed=4, where="test.raw.gz")
    assert Counter(row["label"] for row in rows) == Counter({1: 11, 0: 10})
    by_first_word = {s[0]: s for s in sentences}
    firsts = [row["text"].split()[0] for row in rows]
    assert len(set(firsts)) == len(rows)  # one class only per sentence
    for row in rows:
        words = row["text"].split()
        assert words[-1] == "." and row["text_pair"] is None
        original = by_first_word[words[0]]
        if row["label"] == 1:
            assert words[:-1] == original
        else:
            assert words[:-1] != original and sorted(words[:-1]) == sorted(original) and words[-2] == original[-1]


def test_too_few_sentences_is_an_error_naming_the_file_and_the_counts():
    with pytest.raises(ValueError, match=r"raw/test.raw.gz: 10 examples asked for, but only 2 sentences qualify"):
        word_order_rows([["a", "b", "c", "d"], ["e", "f", "g", "h"]], examples=10, seed=0, where="raw/test.raw.gz")


def test_task_stage_writes_a_split_classification_task_from_a_raw_file(config, tmp_path, task_tokenizers):
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = [f" Sentence number {i} has exactly eight words here . " for i in range(30)]
    with gzip.open(raw / "test.raw.gz", "wt") as fh:
        fh.write("\n".join([" = Title = ", *lines]) + "\n")
    config["datasets"]["order"] = {"role": "task", "modality": "text", "format": "wikitext_word_order",
                                   "word_order": {"examples": 20, "min_words": 5, "max_words": 10, "seed": 0}}
    config["tasks"]["order"] = {"dataset": "order", "modality": "text", "kind": "classification", "metric": "accuracy",
                                "label": "order", "split": {"method": "random", "dev": 0.2, "test": 0.2, "seed": 0}}
    card = prepare_task(config, "order", raw, task_tokenizers["text"], tmp_path / "tasks" / "order",
                        tmp_path / "card.json")
    assert card["rows"] == {"train": 12, "dev": 4, "test": 4} and card["label_names"] == ["shuffled", "natural"]
    train = read_jsonl(tmp_path / "tasks" / "order" / "train.jsonl")
    assert {row["label"] for row in train} == {0, 1}
