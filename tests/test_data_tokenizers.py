"""Tokenizer training (`maskbench.data.tokenizers`): reproducible to the byte with canonical ids,
and the SMILES tokenizer trained from params round-trips molecules."""

from __future__ import annotations

import itertools
import json


def test_tokenizer_training_is_reproducible(tmp_path):
    """Same corpus, same tokenizer file. The corpus is all ties (every three-letter word once) and
    the vocabulary stops mid-way through the merges, where the `tokenizers` trainer alone picks a
    different merge on most runs (huggingface/tokenizers#1794: 15 distinct files in 20 runs)."""
    from maskbench.data.tokenizers import SPECIAL_TOKENS, train_wordpiece

    words = [a + b + c for a, b, c in itertools.permutations("abcdefghij", 3) if a < b]
    files = [train_wordpiece([" ".join(words)], 40, 1, True, tmp_path / f"tok{i}")
             and (tmp_path / f"tok{i}/tokenizer.json")
             for i in range(6)]
    assert len({f.read_text() for f in files}) == 1
    vocab = json.loads(files[0].read_text())["model"]["vocab"]
    assert [t for t, i in sorted(vocab.items(), key=lambda kv: kv[1])][:5] == SPECIAL_TOKENS
    assert len(vocab) == 40


def test_wordpiece_keeps_special_tokens_whole(tmp_path):
    """The continuing-subword tokens handed to the trainer are ordinary vocabulary, not special
    tokens: text is split by WordPiece, and only the five special tokens stay unsplit."""
    from maskbench.data.tokenizers import train_wordpiece

    tok = train_wordpiece(["the cat sat on the mat", "a dog ate the hat"] * 5, 60, 1, True, tmp_path / "tok")
    assert tok.tokenize("the [MASK] sat") == ["the", "[MASK]", "sat"]
    assert tok.tokenize("##a") == ["[UNK]", "[UNK]", "a"]  # "#" is not in the corpus; "##a" is not one token
    assert tok.decode(tok("the cat sat")["input_ids"], skip_special_tokens=True) == "the cat sat"


def test_smiles_tokenizer_trains_from_params(tmp_path):
    from maskbench.data.tokenizers import train_tokenizer

    tok = train_tokenizer("smiles", {"min_frequency": 1}, ["CC(=O)Oc1ccccc1C(=O)O", "C[C@@H](N)Cl", "[nH]1cccc1Br"],
                          tmp_path / "smiles")
    for s in ("Clc1ccccc1", "CC(=O)N[C@@H](C)Br"):
        assert tok.decode(tok(s)["input_ids"], skip_special_tokens=True) == s
