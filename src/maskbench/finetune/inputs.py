"""Task rows to token ids and targets.

Rows come from `data/tasks/<task>/<split>.jsonl`: `{"text", "text_pair", "label"}` for
sentence tasks, `{"smiles", "labels": [...]}` (None = missing) or `{"smiles", "label"}` for
molecules. Targets are float arrays with NaN for missing multi-task labels.
"""

from __future__ import annotations

import numpy as np
import torch


def row_text(row: dict) -> tuple[str, str | None]:
    if "smiles" in row:
        return row["smiles"], None
    return row["text"], row.get("text_pair")


def row_target(row: dict):
    if "labels" in row:
        return [np.nan if v is None else float(v) for v in row["labels"]]
    return np.nan if row.get("label") is None else row["label"]


def targets(rows: list[dict]) -> np.ndarray:
    return np.array([row_target(r) for r in rows], dtype=np.float64)


def encode(rows: list[dict], tokenizer, max_len: int) -> list[list[int]]:
    """Token ids per row; none for a split without rows (the tokenizer rejects an empty batch)."""
    if not rows:
        return []
    texts, pairs = zip(*(row_text(r) for r in rows))
    if any(p is not None for p in pairs):
        return tokenizer(list(texts), list(pairs), truncation="longest_first", max_length=max_len)["input_ids"]
    return tokenizer(list(texts), truncation=True, max_length=max_len)["input_ids"]


def collate(ids: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest sequence of the batch; attention mask 1 on real tokens."""
    length = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), length), pad, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for i, x in enumerate(ids):
        input_ids[i, : len(x)] = torch.tensor(x)
        mask[i, : len(x)] = 1
    return input_ids, mask
