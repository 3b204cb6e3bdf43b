"""Pretraining corpora: read documents per split, and turn them into token streams.

A corpus is one dataset or several (Wikipedia + BookCorpus) whose documents are concatenated
split by split. Each dataset `format` has a reader returning `(documents per split, skipped per
reason)`; a source without a valid split gets one held out of train (`valid_from_train`).

A split's documents are tokenized and concatenated, separated by [SEP], into one memory-mapped
array (`<split>.bin`). Training draws fixed-length windows from one split's stream only, so a
block never crosses a split boundary.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
from rdkit import Chem, rdBase
from tqdm import tqdm

from maskbench.config import corpus_datasets
from maskbench.data.rawfiles import open_text
from maskbench.io import atomic_path, write_json

SPLITS = ("train", "valid", "test")
HOLDOUT_SEED = 0  # the valid split carved out of train is the same draw on every machine
_WIKITEXT_TITLE = re.compile(r"^ = [^=].* = $")

Documents = dict[str, list[str]]


def read_wikitext(raw_dir: Path) -> tuple[Documents, Counter]:
    """WikiText raw files (`<split>.raw.gz`) split into articles at their ` = Title = ` lines."""
    documents = {}
    for split in SPLITS:
        path = raw_dir / f"{split}.raw.gz"
        if not path.exists():
            raise FileNotFoundError(f"{path}: missing; a wikitext corpus needs train/valid/test.raw.gz")
        with open_text(path) as text:
            documents[split] = _wikitext_articles(text.read().splitlines())
    return documents, Counter()


def _wikitext_articles(lines: list[str]) -> list[str]:
    """Articles of one WikiText split: a ` = Title = ` line starts the next one."""
    articles, current = [], []
    for line in lines:
        if _WIKITEXT_TITLE.match(line) and current:
            articles.append(" ".join(current))
            current = []
        if line.strip():
            current.append(line.strip())
    if current:
        articles.append(" ".join(current))
    return articles


def read_smiles_csv(raw_dir: Path) -> tuple[Documents, Counter]:
    """`<split>.csv[.gz]` files (MOSES's layout) with a SMILES column: one molecule per document.

    A SMILES that RDKit cannot even parse is skipped as `unparsable_smiles`. Parsing without
    sanitization is enough here (the tokenizer needs well-formed strings, not valid chemistry)
    and keeps the 1.6M MOSES molecules to seconds instead of minutes."""
    documents, skipped = {}, Counter()
    for split in SPLITS:
        found = [raw_dir / f"{split}{suffix}" for suffix in (".csv", ".csv.gz") if (raw_dir / f"{split}{suffix}").exists()]
        if not found:
            continue
        with open_text(found[0], newline="") as fh:
            frame = pd.read_csv(fh, dtype=str, keep_default_na=False, skip_blank_lines=False)
        column = next((c for c in frame.columns if c.lower() == "smiles"), None)
        if column is None:
            raise ValueError(f"{found[0]}: no SMILES column; columns found: {list(frame.columns)}")
        kept = []
        with rdBase.BlockLogs():
            for smiles in frame[column].str.strip():
                if not smiles:
                    skipped["empty_smiles"] += 1
                elif Chem.MolFromSmiles(smiles, sanitize=False) is None:
                    skipped["unparsable_smiles"] += 1
                else:
                    kept.append(smiles)
        documents[split] = kept
    if "train" not in documents:
        raise FileNotFoundError(f"{raw_dir}: no train.csv or train.csv.gz; a smiles_csv corpus needs <split>.csv[.gz] "
                                f"files for splits {list(SPLITS)} (train required)")
    return documents, skipped


HF_SPLITS = {"train": "train", "validation": "valid", "valid": "valid", "test": "test"}


def read_hf_text(raw_dir: Path) -> tuple[Documents, Counter]:
    """`<split>.jsonl` files as the `hf` source writes them, one document per record's `text`."""
    documents, skipped = {}, Counter()
    for path in sorted(raw_dir.glob("*.jsonl")):
        if path.stem not in HF_SPLITS:
            raise ValueError(f"{path}: unknown split {path.stem!r}; expected one of {sorted(HF_SPLITS)}")
        kept = documents.setdefault(HF_SPLITS[path.stem], [])
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                record = json.loads(line)
                if "text" not in record:
                    raise ValueError(f"{path} line {number}: no `text` field; keys found: {sorted(record)}")
                text = (record["text"] or "").strip()
                if text:
                    kept.append(text)
                else:
                    skipped["empty_text"] += 1
    if "train" not in documents:
        raise FileNotFoundError(f"{raw_dir}: no train.jsonl; an hf_text corpus needs at least the train split")
    return documents, skipped


CORPUS_READERS = {"wikitext": read_wikitext, "smiles_csv": read_smiles_csv, "hf_text": read_hf_text}


def seeded_draw(documents: list[str], count: int) -> tuple[list[str], list[str]]:
    """(drawn, rest): a fixed seeded draw of `count` documents, both in their original order."""
    order = np.random.Generator(np.random.PCG64(HOLDOUT_SEED)).permutation(len(documents))
    drawn = np.zeros(len(documents), dtype=bool)
    drawn[order[:count]] = True
    return [d for d, h in zip(documents, drawn) if h], [d for d, h in zip(documents, drawn) if not h]


def hold_out(documents: list[str], fraction: float) -> tuple[list[str], list[str]]:
    """(rest, held out): a seeded draw of `fraction` of the documents, both in their original order."""
    held, rest = seeded_draw(documents, round(fraction * len(documents)))
    return rest, held


def read_dataset(config: dict, name: str, raw_dir: Path) -> tuple[Documents, Counter]:
    """One corpus dataset's documents per split, with a valid split carved from train if needed."""
    spec = config["datasets"][name]
    if spec["format"] not in CORPUS_READERS:
        raise ValueError(f"datasets.{name}: format {spec['format']!r} is not a corpus format; "
                         f"expected one of {sorted(CORPUS_READERS)}")
    documents, skipped = CORPUS_READERS[spec["format"]](raw_dir)
    if "valid" not in documents and "valid_from_train" in spec:
        documents["train"], documents["valid"] = hold_out(documents["train"], spec["valid_from_train"])
    if "valid" not in documents:
        raise ValueError(f"datasets.{name}: {raw_dir} has no valid split; set `valid_from_train` to hold one out")
    if len(documents["train"]) > spec.get("max_train_documents", len(documents["train"])):
        documents["train"], unused = seeded_draw(documents["train"], spec["max_train_documents"])
        skipped["beyond_max_train_documents"] += len(unused)
    empty = {split: len(docs) for split, docs in documents.items() if split in ("train", "valid") and not docs}
    if empty:
        raise ValueError(f"datasets.{name}: {raw_dir} gives no documents in split(s) {sorted(empty)} (documents per "
                         f"split: { {s: len(d) for s, d in documents.items()} }, skipped: {dict(skipped)}); "
                         "a corpus needs train and valid documents")
    return documents, skipped


def read_corpus(config: dict, modality: str, raw_dirs: list[Path]) -> tuple[Documents, dict]:
    """The documents of a modality's corpus per split (its datasets concatenated in order, read
    from `raw_dirs`, one per dataset), and per dataset the documents per split and the skipped
    ones per reason, for the data card."""
    documents, card = {}, {}
    for name, raw_dir in zip(corpus_datasets(config, modality), raw_dirs, strict=True):
        parts, skipped = read_dataset(config, name, Path(raw_dir))
        for split, docs in parts.items():
            documents.setdefault(split, []).extend(docs)
        card[name] = {"documents": {split: len(docs) for split, docs in parts.items()},
                      "skipped": dict(sorted(skipped.items()))}
    return documents, card


# Fewest tokens a split needs: a train or valid stream shorter than one block cannot be sampled
# (the smallest profile's blocks are 32 tokens); a corpus that small is a broken download.
MIN_TOKENS = {"train": 64, "valid": 32}


def token_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


def tokenize_corpus(documents: Documents, tokenizer, out_dir: Path, batch: int = 1024,
                    min_tokens: dict[str, int] | None = None) -> dict:
    """Write `<split>.bin` token streams and `meta.json` (dtype, vocabulary size, counts per
    split, `unigram_loss`) into `out_dir` (atomically); a split with fewer tokens than
    `min_tokens` names (the tokenize stage: MIN_TOKENS) writes nothing."""
    dtype = token_dtype(len(tokenizer))
    sep = tokenizer.sep_token_id
    stats, counts = {}, {}
    with atomic_path(out_dir, is_dir=True) as tmp:
        for split, docs in documents.items():
            tokens, counts[split] = 0, np.zeros(len(tokenizer), dtype=np.int64)
            with open(tmp / f"{split}.bin", "wb") as fh:  # batch by batch: memory stays O(batch)
                for start in tqdm(range(0, len(docs), batch), desc=f"tokenize {split}", unit="batch"):
                    encoded = tokenizer(docs[start:start + batch], add_special_tokens=False)["input_ids"]
                    chunk = np.concatenate([np.asarray(ids + [sep], dtype=dtype) for ids in encoded])
                    chunk.tofile(fh)
                    tokens += chunk.size
                    counts[split] += np.bincount(chunk, minlength=len(tokenizer))
            stats[split] = {"documents": len(docs), "tokens": tokens}
            if tokens < (min_tokens or {}).get(split, 0):
                raise ValueError(f"{out_dir}/{split}.bin: {split} split has {tokens} tokens from {len(docs)} "
                                 f"documents; at least {min_tokens[split]} are needed to draw pretraining blocks")
        meta = {"dtype": np.dtype(dtype).name, "vocab_size": len(tokenizer), "splits": stats,
                "unigram_loss": unigram_loss(counts["train"], counts["valid"], tokenizer.all_special_ids)}
        write_json(tmp / "meta.json", meta)
    return meta


def unigram_loss(train_counts: np.ndarray, valid_counts: np.ndarray, special_ids: list[int]) -> float:
    """Cross-entropy in nats per token of the valid split under the unigram distribution of the
    train split, from each split's count per token id (length V):
    the loss of a model that has learned token frequencies and nothing else, which a pretrained
    model's validation loss has to beat (metrics.json's `unigram_gap`).

    Add-one smoothing over the vocabulary, so a token unseen in train costs log(N + V) rather
    than infinity. Special tokens ([SEP] between documents, [UNK], ...) are left out of both
    counts and of V: they are the stream's framing, not its text, and [SEP] alone would be a
    large share of a short-document corpus (one per SMILES molecule)."""
    text = np.ones(len(train_counts), dtype=bool)
    text[list(special_ids)] = False
    train_counts, valid_counts = train_counts[text].astype(np.float64), valid_counts[text].astype(np.float64)
    log_p = np.log(train_counts + 1.0) - np.log(train_counts.sum() + train_counts.size)
    return float(-(valid_counts * log_p).sum() / valid_counts.sum())


def load_stream(tokens_dir: Path, split: str) -> np.memmap:
    from maskbench.io import read_json

    meta = read_json(tokens_dir / "meta.json")
    return np.memmap(tokens_dir / f"{split}.bin", dtype=meta["dtype"], mode="r")
