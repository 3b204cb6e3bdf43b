"""Pretraining corpora: read documents per split, and turn them into token streams.

A split's documents are tokenized and concatenated, separated by [SEP], into one memory-mapped
array (`<split>.bin`). Training draws fixed-length windows from one split's stream only, so a
block never crosses a split boundary.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
from tqdm import tqdm

from maskbench.io import atomic_path, write_json

SPLITS = ("train", "valid", "test")
_WIKITEXT_TITLE = re.compile(r"^ = [^=].* = $")


def read_wikitext(raw_dir: Path) -> dict[str, list[str]]:
    """WikiText raw files (`<split>.raw.gz`) split into articles at their ` = Title = ` lines."""
    documents = {}
    for split in SPLITS:
        path = raw_dir / f"{split}.raw.gz"
        if not path.exists():
            raise FileNotFoundError(f"{path}: missing; a wikitext corpus needs train/valid/test.raw.gz")
        articles, current = [], []
        for line in gzip.decompress(path.read_bytes()).decode("utf-8").splitlines():
            if _WIKITEXT_TITLE.match(line) and current:
                articles.append(" ".join(current))
                current = []
            if line.strip():
                current.append(line.strip())
        if current:
            articles.append(" ".join(current))
        documents[split] = articles
    return documents


CORPUS_READERS = {"wikitext": read_wikitext}


def read_corpus(fmt: str, raw_dir: Path) -> dict[str, list[str]]:
    if fmt not in CORPUS_READERS:
        raise ValueError(f"unknown corpus format {fmt!r}; expected one of {sorted(CORPUS_READERS)}")
    return CORPUS_READERS[fmt](raw_dir)


def token_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


def tokenize_corpus(documents: dict[str, list[str]], tokenizer, out_dir: Path, batch: int = 64) -> dict:
    """Write `<split>.bin` token streams and `meta.json` into `out_dir` (atomically)."""
    dtype = token_dtype(len(tokenizer))
    sep = tokenizer.sep_token_id
    stats = {}
    with atomic_path(out_dir, is_dir=True) as tmp:
        for split, docs in documents.items():
            chunks = []
            for start in tqdm(range(0, len(docs), batch), desc=f"tokenize {split}", unit="batch"):
                encoded = tokenizer(docs[start:start + batch], add_special_tokens=False)["input_ids"]
                for ids in encoded:
                    chunks.append(np.asarray(ids + [sep], dtype=dtype))
            stream = np.concatenate(chunks) if chunks else np.zeros(0, dtype=dtype)
            stream.tofile(tmp / f"{split}.bin")
            stats[split] = {"documents": len(docs), "tokens": int(stream.size)}
        meta = {"dtype": np.dtype(dtype).name, "vocab_size": len(tokenizer), "splits": stats}
        write_json(tmp / "meta.json", meta)
    return meta


def load_stream(tokens_dir: Path, split: str) -> np.memmap:
    from maskbench.io import read_json

    meta = read_json(tokens_dir / "meta.json")
    return np.memmap(tokens_dir / f"{split}.bin", dtype=meta["dtype"], mode="r")
