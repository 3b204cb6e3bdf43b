"""SMILES tokenizer: the regex of Schwaller et al. 2018 ("Molecular Transformer"), with bracket
atoms cut into their parts, over a vocabulary that holds the whole SMILES alphabet.

A SMILES string is first cut into chemical units by one regular expression (`SMILES_PATTERN`):
a bracket atom (``[nH]``, ``[C@@H]``, ``[13CH3]``, ``[O-]``), ``Br`` and ``Cl``, ``%nn`` ring
closures, and every other character on its own. Each unit is then cut into the pieces a model
reads (`PIECE_PATTERN`): a bracket atom into ``[``, isotope digits, element, chirality ``@`` or
``@@``, ``H`` and its count, charge sign and digits, ``]`` (``[C@@H]`` -> ``[ C @@ H ]``,
``[O-]`` -> ``[ O - ]``); a ``%nn`` ring closure into ``% n n``. A catch-all alternative makes
every character belong to some token, so the tokens always concatenate back to the input.

Why the pieces (docs/notes/2026-11-27-smiles-vocabulary.md): MOSES, the pretraining corpus of
every profile but `paper`, holds no stereocentre, charge, salt or stereo bond, so a vocabulary of
the whole bracket atoms it holds read 4-6 % of BBBP's tokens as ``[UNK]``, and ``[C@H]`` and
``[C@@H]`` -- two enantiomers -- as one sequence. Bracket atoms combine isotope, element,
chirality, H count and charge freely; their pieces are a small closed set. The vocabulary is
the pieces seen in the corpus plus `SMILES_ALPHABET` (every element, aromatic symbol, bond,
chirality and charge mark, digit), so any well-formed SMILES reads without ``[UNK]``; a piece the
corpus never shows keeps its initial embedding until fine-tuning trains it.

The tokenizer is built with the ``tokenizers`` library (two regex ``Split`` pre-tokenizers,
word-level vocabulary, ``[CLS] ... [SEP]`` template, a ``Fuse`` decoder that joins tokens
without spaces) and saved as a directory that ``transformers.AutoTokenizer.from_pretrained``
loads.

    tok = train_smiles_tokenizer(smiles_list, "data/tokenizers/smiles")
    tok.decode(tok(s)["input_ids"], skip_special_tokens=True) == s
"""

from __future__ import annotations

import os
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

PIECE_PATTERN = (
    r"@@"  # chirality (clockwise); `@` alone, counter-clockwise, falls to the catch-all
    r"|[A-Z][a-z]?"  # an element: Cl and Br outside brackets, any symbol (Na, Se, Fe) inside
    r"|[a-z][a-z]?"  # an aromatic atom (c, n, se, as)
    r"|."  # brackets, bonds, branches, each digit, charge signs, `@`, `.`, `%`
)

ELEMENTS = (
    "H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge As Se Br Kr "
    "Rb Sr Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd Pm Sm Eu Gd Tb Dy Ho Er Tm Yb "
    "Lu Hf Ta W Re Os Ir Pt Au Hg Tl Pb Bi Po At Rn Fr Ra Ac Th Pa U Np Pu Am Cm Bk Cf Es Fm Md No Lr "
    "Rf Db Sg Bh Hs Mt Ds Rg Cn Nh Fl Mc Lv Ts Og"
).split()
# Every piece a well-formed SMILES is made of (OpenSMILES): the elements, the aromatic symbols,
# brackets, chirality, charges, bonds, branches, ring-closure digits, `.` and the wildcard.
SMILES_ALPHABET = sorted({*ELEMENTS, "b", "c", "n", "o", "p", "s", "se", "as", "te",
                          "[", "]", "@", "@@", "+", "-", "=", "#", "$", ":", "/", "\\", ".", "(", ")", "%", "*",
                          *"0123456789"})

UNK = "[UNK]"


def build_smiles_tokenizer() -> Tokenizer:
    """An untrained tokenizer: the two regex pre-tokenizers, empty word-level model, fusing decoder."""
    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SMILES_PATTERN), behavior="isolated"),
        pre_tokenizers.Split(Regex(PIECE_PATTERN), behavior="isolated"),
    ])
    tokenizer.decoder = decoders.Fuse()
    return tokenizer


def train_smiles_tokenizer(
    smiles_iter: Iterable[str], out_dir: str | os.PathLike, min_frequency: int = 1
) -> PreTrainedTokenizerFast:
    """Learn the vocabulary (every piece seen at least ``min_frequency`` times in the training
    SMILES, `SMILES_ALPHABET`, and the five special tokens at ids 0-4) and save the tokenizer to
    ``out_dir`` atomically (written next to it, then renamed into place)."""
    tokenizer = build_smiles_tokenizer()
    trainer = trainers.WordLevelTrainer(
        vocab_size=1 << 30, min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS, show_progress=False
    )
    tokenizer.train_from_iterator(smiles_iter, trainer=trainer)
    learned = tokenizer.get_vocab()
    if len(learned) <= len(SPECIAL_TOKENS):  # an empty corpus: refused by save_tokenizer, alphabet or not
        return save_tokenizer(tokenizer, Path(out_dir), clean_up_tokenization_spaces=False)
    vocab = canonical_vocab({**learned, **dict.fromkeys(SMILES_ALPHABET, 0)})
    tokenizer.model = models.WordLevel(vocab, unk_token=UNK)
    return save_tokenizer(tokenizer, Path(out_dir), clean_up_tokenization_spaces=False)
