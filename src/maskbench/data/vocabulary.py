"""What every tokenizer of maskbench shares: the special tokens at fixed ids, a vocabulary
numbered reproducibly, the [CLS] A [SEP] (B [SEP]) framing, and saving as a directory that
`transformers.AutoTokenizer.from_pretrained` loads."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, processors
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
    """Frame sequences as [CLS] A [SEP] (B [SEP]), wrap for `transformers`, save atomically; a
    vocabulary of nothing but the special tokens (an empty corpus) is refused, unsaved."""
    if tok.get_vocab_size() <= len(SPECIAL_TOKENS):
        raise ValueError(f"{out_dir}: the trained vocabulary has {tok.get_vocab_size()} tokens, only the special "
                         f"ones {SPECIAL_TOKENS}; the corpus's train split gave no tokens to learn")
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", **wrapper_options)
    with atomic_path(out_dir, is_dir=True) as tmp:
        fast.save_pretrained(tmp)
    return fast
