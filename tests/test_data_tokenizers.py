"""Tokenizer training (`maskbench.data.tokenizers`): reproducible to the byte with canonical ids,
and the SMILES tokenizer trained from params round-trips molecules."""

from __future__ import annotations

import json

import numpy as np


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


def test_smiles_tokenizer_trains_from_params(tmp_path):
    from maskbench.data.tokenizers import train_tokenizer

    tok = train_tokenizer("smiles", {"min_frequency": 1}, ["CC(=O)Oc1ccccc1C(=O)O", "C[C@@H](N)Cl", "[nH]1cccc1Br"],
                          tmp_path / "smiles")
    for s in ("Clc1ccccc1", "CC(=O)N[C@@H](C)Br"):
        assert tok.decode(tok(s)["input_ids"], skip_special_tokens=True) == s
