"""Task rows to token ids and targets.

Rows come from `data/tasks/<task>/<split>.jsonl`: `{"text", "text_pair", "label"}` for
sentence tasks, `{"smiles", "labels": [...]}` (None = missing) or `{"smiles", "label"}` for
molecules. Targets are float arrays with NaN for missing multi-task labels.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.trainer_pt_utils import get_length_grouped_indices


def row_text(row: dict) -> tuple[str, str | None]:
    if "smiles" in row:
        return row["smiles"], None
    return row["text"], row.get("text_pair")


def row_target(row: dict):
    if "labels" in row:
        return [np.nan if v is None else float(v) for v in row["labels"]]
    return np.nan if row.get("label") is None else row["label"]


def target_json(value):
    """A row's target as JSON writes it (predictions files): NaN, a missing label, as null."""
    value = np.asarray(value, dtype=np.float64)
    if value.ndim == 0:
        return None if np.isnan(value) else value.item()
    return [None if np.isnan(v) else v for v in value.tolist()]


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


def epoch_order(index: np.ndarray, lengths: list[int], batch_size: int, rng: np.random.Generator,
                group_by_length: bool) -> np.ndarray:
    """One epoch's order of the training rows `index`. With `group_by_length` (transformers'
    Trainer option of that name): shuffled, then sorted by length within mega-batches of 50
    batches at most, so each batch pads to little; a batch of short molecules then costs what
    they need, not the length of the longest row drawn beside them."""
    if not group_by_length:
        return rng.permutation(index)
    generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
    return index[get_length_grouped_indices([lengths[i] for i in index], batch_size, generator=generator)]


def batches_by_length(ids: list[list[int]], batch_size: int) -> list[np.ndarray]:
    """Positions of `ids` in batches of rows of similar length, for evaluation: padding is
    masked, so a row's prediction does not depend on its batch, and shorter batches cost less."""
    order = np.argsort([len(x) for x in ids], kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def row_order(batches: list[np.ndarray]) -> np.ndarray:
    """Where each row's output sits in the outputs of `batches` concatenated: indexing those
    outputs with it puts them back in row order."""
    where = np.empty(sum(len(b) for b in batches), dtype=np.int64)
    where[np.concatenate(batches)] = np.arange(len(where))
    return where
