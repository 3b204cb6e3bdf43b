"""Train a modality's tokenizer on its corpus's train split only, saved so that
`transformers.AutoTokenizer.from_pretrained(dir)` loads it: WordPiece (as BERT) for text, the
regular-expression tokenizer of Schwaller et al. (maskbench.data.smiles) for SMILES."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from maskbench.data.smiles import train_smiles_tokenizer
from maskbench.data.vocabulary import SPECIAL_TOKENS, canonical_vocab, save_tokenizer

def train_wordpiece(texts: list[str], vocab_size: int, min_frequency: int, lowercase: bool, out_dir: Path):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS, show_progress=True
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tok.model = models.WordPiece(canonical_vocab(tok.get_vocab()), unk_token="[UNK]")
    return save_tokenizer(tok, out_dir, do_lower_case=lowercase)


def train_tokenizer(modality: str, spec: dict, train_documents: list[str], out_dir: Path):
    """The tokenizer `tokenizer.<modality>` of params.yaml describes, trained and saved to `out_dir`."""
    if modality == "smiles":
        return train_smiles_tokenizer(train_documents, out_dir, spec.get("min_frequency", 1))
    return train_wordpiece(train_documents, spec["vocab_size"], spec.get("min_frequency", 2),
                           spec.get("lowercase", True), out_dir)
