"""How much of a task its pretrained tokenizer cannot read: the `[UNK]` share of each split.

A token the vocabulary lacks becomes `[UNK]`, and two inputs that differ only there become one
sequence (an enantiomer pair, `[C@H]` against `[C@@H]`, under a vocabulary without chirality).
The task stage writes the share per split into the task's card and refuses a task whose share
passes `tokenizer.max_unknown_rate`, naming the strings that fell to `[UNK]` most often; the
tables show it beside each SMILES task (docs/notes/2026-11-27-smiles-vocabulary.md).
"""

from __future__ import annotations

from collections import Counter

TOP = 10  # how many of the commonest unknown strings a card and an error name


def row_texts(row: dict) -> list[str]:
    """The strings of a task row that fine-tuning tokenizes: a molecule's SMILES, a sentence
    (and its pair), a QA row's question and context."""
    if "smiles" in row:
        return [row["smiles"]]
    if "context" in row:
        return [row["question"], row["context"]]
    return [text for text in (row["text"], row.get("text_pair")) if text is not None]


def unknown_tokens(tokenizer, rows: list[dict], batch: int = 1024) -> dict:
    """`tokens` (special tokens not counted), `unknown` (those read as `[UNK]`), their `rate`,
    and the `top` strings that became `[UNK]`, most frequent first (read back from the
    tokenizer's offsets, so a text tokenizer's lowercasing does not hide which word it was)."""
    texts = [text for row in rows for text in row_texts(row)]
    unk, total, unknown, seen = tokenizer.unk_token_id, 0, 0, Counter()
    for start in range(0, len(texts), batch):
        part = texts[start:start + batch]
        encoded = tokenizer(part, add_special_tokens=False, return_offsets_mapping=True)
        for text, ids, offsets in zip(part, encoded["input_ids"], encoded["offset_mapping"]):
            total += len(ids)
            for token, (begin, end) in zip(ids, offsets):
                if token == unk:
                    unknown += 1
                    seen[text[begin:end]] += 1
    return {"tokens": total, "unknown": unknown, "rate": unknown / total if total else 0.0,
            "top": dict(seen.most_common(TOP))}


def require_known(task: str, rates: dict[str, dict], limit: float) -> None:
    """Refuse a task with a split whose `[UNK]` share passes `limit` (params.yaml
    `tokenizer.max_unknown_rate`): its scores would be read off inputs the model cannot tell apart."""
    over = {split: r for split, r in rates.items() if r["rate"] > limit}
    if not over:
        return
    lines = [f"{split}: {r['unknown']:,} of {r['tokens']:,} tokens ({r['rate']:.2%}), most often "
             + ", ".join(f"{text!r} x{n}" for text, n in r["top"].items()) for split, r in over.items()]
    raise ValueError(f"tasks.{task}: the tokenizer reads more than tokenizer.max_unknown_rate = {limit:.2%} of the "
                     "task's tokens as [UNK]:\n  " + "\n  ".join(lines) + "\nGive the tokenizer a corpus or "
                     "vocabulary that holds these strings, or raise tokenizer.max_unknown_rate in params.yaml "
                     "to accept the loss knowingly.")
