"""Train a modality's tokenizer on its corpus's train split only, saved so that
`transformers.AutoTokenizer.from_pretrained(dir)` loads it: WordPiece (as BERT) for text, the
regular-expression tokenizer of Schwaller et al. (maskbench.data.smiles) for SMILES."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from maskbench.io import atomic_path

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def canonical_vocab(vocab: dict[str, int]) -> dict[str, int]:
    """Special tokens at ids 0-4, then every other token in sorted order.

    The `tokenizers` trainers number learned tokens in hash-map iteration order, so the same
    corpus gives different ids from run to run (huggingface/tokenizers#1794); renumbering makes
    the tokenizer, and every token stream and checkpoint after it, reproducible.
    """
    rest = sorted(token for token in vocab if token not in SPECIAL_TOKENS)
    return {token: i for i, token in enumerate(SPECIAL_TOKENS + rest)}


def save_tokenizer(tok: Tokenizer, out_dir: Path, **wrapper_options) -> PreTrainedTokenizerFast:
    """Frame sequences as [CLS] A [SEP] (B [SEP]), wrap for `transformers`, save atomically."""
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", **wrapper_options)
    with atomic_path(out_dir, is_dir=True) as tmp:
        fast.save_pretrained(tmp)
    return fast


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
        from maskbench.data.smiles import train_smiles_tokenizer

        return train_smiles_tokenizer(train_documents, out_dir, spec.get("min_frequency", 1))
    return train_wordpiece(train_documents, spec["vocab_size"], spec.get("min_frequency", 2),
                           spec.get("lowercase", True), out_dir)
