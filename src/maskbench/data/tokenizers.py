"""Train a modality's tokenizer on its corpus's train split only, saved so that
`transformers.AutoTokenizer.from_pretrained(dir)` loads it: WordPiece (as BERT) for text, the
regular-expression tokenizer of Schwaller et al. (maskbench.data.smiles) for SMILES.

The train documents come as a collection that can be iterated more than once (a list, or the
corpus's `SplitDocuments`, which re-reads the raw files on every pass): WordPiece reads them twice
(their characters, then `train_from_iterator`), and neither pass keeps them, so memory grows with
the vocabulary learned, not with the corpus."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from maskbench.data.smiles import train_smiles_tokenizer
from maskbench.data.vocabulary import SPECIAL_TOKENS, canonical_vocab, save_tokenizer

CONTINUING_PREFIX = "##"


def continuing_subwords(texts: Iterable[str], normalizer) -> list[str]:
    """'##c' for every character c of the normalized corpus, sorted.

    The WordPiece trainer numbers these tokens in hash-map order while it reads the words, and
    breaks ties between equally frequent merges by those numbers, so two runs on one corpus learn
    different vocabularies (huggingface/tokenizers#1794). Handed to the trainer up front, in sorted
    order, they get fixed ids and the merges become reproducible.
    """
    characters = set()
    for text in texts:
        characters.update(normalizer.normalize_str(text))
    return [CONTINUING_PREFIX + c for c in sorted(characters) if not c.isspace()]


def wordpiece_tokenizer(vocab: dict[str, int], lowercase: bool) -> Tokenizer:
    """BERT's WordPiece pipeline over `vocab`, with the special tokens as special."""
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix=CONTINUING_PREFIX))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix=CONTINUING_PREFIX)
    tok.add_special_tokens([AddedToken(token, special=True) for token in SPECIAL_TOKENS])
    return tok


def train_wordpiece(texts: Collection[str], vocab_size: int, min_frequency: int, lowercase: bool, out_dir: Path):
    trainee = wordpiece_tokenizer({}, lowercase)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=True,
        special_tokens=SPECIAL_TOKENS + continuing_subwords(texts, trainee.normalizer),
        continuing_subword_prefix=CONTINUING_PREFIX,
    )
    trainee.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tok = wordpiece_tokenizer(canonical_vocab(trainee.get_vocab(with_added_tokens=False)), lowercase)
    return save_tokenizer(tok, out_dir, do_lower_case=lowercase)


def train_tokenizer(modality: str, spec: dict, train_documents: Collection[str], out_dir: Path):
    """The tokenizer `tokenizer.<modality>` of params.yaml describes, trained and saved to `out_dir`."""
    if modality == "smiles":
        return train_smiles_tokenizer(train_documents, out_dir, spec.get("min_frequency", 1))
    return train_wordpiece(train_documents, spec["vocab_size"], spec.get("min_frequency", 2),
                           spec.get("lowercase", True), out_dir)
