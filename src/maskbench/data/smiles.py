"""SMILES tokenizer of Schwaller et al. 2018 ("Molecular Transformer"), as ExLM uses it.

A SMILES string is cut into chemically meaningful tokens by one regular expression:
a whole bracket atom (``[nH]``, ``[C@@H]``, ``[13CH3]``, ``[O-]``) is one token, the two-letter
organic-subset atoms ``Br`` and ``Cl`` are one token each, and every other character (one-letter
atoms, bonds, branches, ring-closure digits) is a token of its own, except ``%nn`` ring
closures which stay whole. A final catch-all alternative makes every character belong to some
token, so the tokens always concatenate back to the input string.

The tokenizer is built with the ``tokenizers`` library (regex ``Split`` pre-tokenizer, word-level
vocabulary of the tokens seen in training, ``[CLS] ... [SEP]`` template, a ``Fuse`` decoder that
joins tokens without spaces) and saved as a directory that
``transformers.AutoTokenizer.from_pretrained`` loads.

    tok = train_smiles_tokenizer(smiles_list, "data/tokenizers/smiles")
    tok.decode(tok(s)["input_ids"], skip_special_tokens=True) == s
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from maskbench.data.vocabulary import SPECIAL_TOKENS, canonical_vocab, save_tokenizer

SMILES_PATTERN = (
    r"\[[^\[\]]+\]"  # bracket atom: isotope, element, chirality, H count, charge, atom class
    r"|Br|Cl"  # two-letter atoms of the organic subset
    r"|%\d\d"  # two-digit ring closure
    r"|[BCNOPSFI]|[bcnops]"  # one-letter atoms of the organic subset, aliphatic and aromatic
    r"|\d"  # one-digit ring closure
    r"|[()=#$:~.+\-/\\@?>*]"  # branches, bonds, disconnection, reaction arrow, wildcard
    r"|."  # anything else stays a token of its own, so no character is ever dropped
)
SMILES_REGEX = re.compile(SMILES_PATTERN)

UNK = "[UNK]"


def split_smiles(smiles: str) -> list[str]:
    """The regex tokens of one SMILES string; ``"".join(split_smiles(s)) == s`` always."""
    return SMILES_REGEX.findall(smiles)


def build_smiles_tokenizer() -> Tokenizer:
    """An untrained tokenizer: regex pre-tokenizer, empty word-level model, fusing decoder."""
    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(SMILES_PATTERN), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    return tokenizer


def train_smiles_tokenizer(
    smiles_iter: Iterable[str], out_dir: str | os.PathLike, min_frequency: int = 1
) -> PreTrainedTokenizerFast:
    """Learn the vocabulary (every regex token seen at least ``min_frequency`` times in the
    training SMILES, plus the five special tokens at ids 0-4) and save the tokenizer to
    ``out_dir`` atomically (written next to it, then renamed into place)."""
    tokenizer = build_smiles_tokenizer()
    trainer = trainers.WordLevelTrainer(
        vocab_size=1 << 30, min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS, show_progress=False
    )
    tokenizer.train_from_iterator(smiles_iter, trainer=trainer)
    tokenizer.model = models.WordLevel(canonical_vocab(tokenizer.get_vocab()), unk_token=UNK)
    return save_tokenizer(tokenizer, Path(out_dir), clean_up_tokenization_spaces=False)
