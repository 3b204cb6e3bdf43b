"""Pretraining corpora: stream documents per split, and turn them into token streams.

A corpus is one dataset or several (Wikipedia + BookCorpus) whose documents are concatenated
split by split. Nothing here holds a split's documents in memory: the tens of GB of the paper
profile's text would not fit. Each dataset `format` has a reader that opens its raw files and
returns, per split, a `Stream` (a function that makes one fresh pass over the split's documents,
counting skipped ones per reason). `read_corpus` makes one counting pass (the census: documents
per split and skipped ones, for the data card and the checks), draws the held-out valid split
(`valid_from_train`) and the `max_train_documents` subset as boolean masks over the train
documents (a byte per document, 4 more while drawing; never their text), and hands each split
out as `SplitDocuments`: re-iterable, every iteration a new pass over the files, with the census
count as its `len`. Memory thus grows with the number of documents by a few bytes each, and not
at all with their text.

A split's documents are tokenized batch by batch and appended, separated by [SEP], to one
memory-mapped array (`<split>.bin`), the unigram counts summed as they go (the train split's
are kept, `train_counts.npy`: pretraining starts every LM head at them). Training draws
fixed-length windows from one split's stream only, so a block never crosses a split boundary.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
from rdkit import Chem, rdBase
from tqdm import tqdm

from maskbench.config import corpus_datasets, run_settings
from maskbench.data.rawfiles import open_text
from maskbench.io import OutputFile, atomic_path, damaged, read_json, reading, write_json

SPLITS = ("train", "valid", "test")
# The splits the tokenize stage writes a stream for: what pretraining, the analyses and the
# perplexity stage read (`load_stream`). A corpus's test split is counted on its card but not
# tokenized: no stage reads it, and on MOSES (176,074 molecules) it was most of the job.
STREAMS = ("train", "valid")
TRAIN_COUNTS = "train_counts.npy"  # count per token id of the train stream, beside meta.json
HOLDOUT_SEED = 0  # the valid split carved out of train is the same draw on every machine
_WIKITEXT_TITLE = re.compile(r"^ = [^=].* = $")

Stream = Callable[[Counter], Iterator[str]]
"""One pass over a split's documents, in file order; a document it drops is counted, by reason,
into the Counter it is given."""


def read_wikitext(raw_dir: Path) -> dict[str, Stream]:
    """WikiText raw files (`<split>.raw.gz`), each split into articles at its ` = Title = ` lines."""
    streams = {}
    for split in SPLITS:
        path = raw_dir / f"{split}.raw.gz"
        if not path.exists():
            raise FileNotFoundError(f"{path}: missing; a wikitext corpus needs train/valid/test.raw.gz")
        streams[split] = partial(_wikitext_file, path)
    return streams


def _wikitext_file(path: Path, skipped: Counter) -> Iterator[str]:
    """The articles of one WikiText file, read line by line (WikiText drops nothing: `skipped`
    stays empty). `str.splitlines` breaks lines where splitting the whole text did (also at
    U+2028, U+0085, ...), which reading a file line by line alone does not."""
    with open_text(path) as text:
        yield from _wikitext_articles(line for chunk in text for line in chunk.splitlines())


def _wikitext_articles(lines: Iterable[str]) -> Iterator[str]:
    """Articles of one WikiText split: a ` = Title = ` line starts the next one."""
    current = []
    for line in lines:
        if _WIKITEXT_TITLE.match(line) and current:
            yield " ".join(current)
            current = []
        if line.strip():
            current.append(line.strip())
    if current:
        yield " ".join(current)


SMILES_CHUNK = 100_000  # CSV rows parsed at a time: memory stays at one chunk, whatever the file


def read_smiles_csv(raw_dir: Path) -> dict[str, Stream]:
    """`<split>.csv[.gz]` files (MOSES's layout) with a SMILES column: one molecule per document."""
    streams = {}
    for split in SPLITS:
        found = [raw_dir / f"{split}{suffix}" for suffix in (".csv", ".csv.gz")
                 if (raw_dir / f"{split}{suffix}").exists()]
        if found:
            streams[split] = partial(_smiles_documents, found[0], _smiles_column(found[0]))
    if "train" not in streams:
        raise FileNotFoundError(f"{raw_dir}: no train.csv or train.csv.gz; a smiles_csv corpus needs <split>.csv[.gz] "
                                f"files for splits {list(SPLITS)} (train required)")
    return streams


def _smiles_column(path: Path) -> str:
    """The name of the SMILES column (any case), read from the header row alone."""
    with open_text(path, newline="") as fh:
        columns = list(pd.read_csv(fh, dtype=str, nrows=0).columns)
    column = next((c for c in columns if c.lower() == "smiles"), None)
    if column is None:
        raise ValueError(f"{path}: no SMILES column; columns found: {columns}")
    return column


_PARSABLE: dict[tuple[str, int, int], list[np.ndarray]] = {}  # file -> per chunk, which rows RDKit parses


def _smiles_documents(path: Path, column: str, skipped: Counter) -> Iterator[str]:
    """The molecules of one CSV file, parsed `SMILES_CHUNK` rows at a time.

    A SMILES that RDKit cannot even parse is skipped as `unparsable_smiles`. Parsing without
    sanitization is enough here (the tokenizer needs well-formed strings, not valid chemistry).
    RDKit's verdicts are what a pass costs (about a minute for MOSES's 1.6M molecules, where
    reading the file takes a second), and a stage makes up to three passes over the train file
    (the census, then the tokenizer's characters and training, or the train and valid splits
    carved from it): the first complete pass keeps them (a byte per row) for the later ones."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    known, verdicts = _PARSABLE.get(key), []
    with open_text(path, newline="") as fh, rdBase.BlockLogs():
        chunks = pd.read_csv(fh, dtype=str, keep_default_na=False, skip_blank_lines=False, usecols=[column],
                             chunksize=SMILES_CHUNK)
        for index, chunk in enumerate(chunks):
            molecules = chunk[column].str.strip().tolist()
            parsable = known[index] if known is not None else np.fromiter(
                (Chem.MolFromSmiles(smiles, sanitize=False) is not None for smiles in molecules), bool, len(molecules))
            verdicts.append(parsable)
            for smiles, ok in zip(molecules, parsable):
                if not smiles:
                    skipped["empty_smiles"] += 1
                elif not ok:
                    skipped["unparsable_smiles"] += 1
                else:
                    yield smiles
    _PARSABLE[key] = verdicts


HF_SPLITS = {"train": "train", "validation": "valid", "valid": "valid", "test": "test"}
_HUB_SHARD = re.compile(r"(?:.*-)?(?P<split>[a-z]+)-\d+-of-\d+")  # [<name>-]<split>-00000-of-00041
PARQUET_BATCH = 256  # records turned into Python strings at a time (a row group is read whole)


def read_hf_text(raw_dir: Path) -> dict[str, Stream]:
    """A hub dataset's files, one document per record's `text`: the parquet shards the `hf`
    source fetches, in the hub's layout (`<config>/<split>-00000-of-00041.parquet`, or
    `<config>/<split>/0000.parquet` on the `refs/convert/parquet` branch), or `<split>.jsonl`
    files (a local export). A split's files are read in sorted order, so shards stay in sequence."""
    files: dict[str, list[Path]] = {}
    for path in sorted(p for p in raw_dir.rglob("*") if p.suffix in HF_RECORDS and p.is_file()):
        files.setdefault(_hf_split(path), []).append(path)
    if "train" not in files:
        raise FileNotFoundError(f"{raw_dir}: no train split (train.jsonl or train-*.parquet); an hf_text corpus needs "
                                "at least the train split")
    return {split: partial(_hf_documents, paths) for split, paths in files.items()}


def _hf_split(path: Path) -> str:
    """The split a hub file holds, from its name (`train.jsonl`, `train-00000-of-00002.parquet`)
    or its folder (`train/0000.parquet`)."""
    shard = _HUB_SHARD.fullmatch(path.stem)
    for name in (path.stem, shard and shard["split"], path.parent.name):
        if name in HF_SPLITS:
            return HF_SPLITS[name]
    raise ValueError(f"{path}: unknown split; expected <split>.jsonl, <split>-NNNNN-of-NNNNN.parquet or "
                     f"<split>/NNNN.parquet with <split> one of {sorted(HF_SPLITS)}")


def _hf_documents(paths: list[Path], skipped: Counter) -> Iterator[str]:
    for path in paths:
        for text in HF_RECORDS[path.suffix](path):
            text = (text or "").strip()
            if text:
                yield text
            else:
                skipped["empty_text"] += 1


def _jsonl_texts(path: Path) -> Iterator[str | None]:
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            record = json.loads(line)
            if "text" not in record:
                raise ValueError(f"{path} line {number}: no `text` field; keys found: {sorted(record)}")
            yield record["text"]


def _parquet_texts(path: Path) -> Iterator[str | None]:
    """The `text` column of one parquet file, `PARQUET_BATCH` records at a time."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(f"{path}: reading the hub's parquet files needs pyarrow: "
                          "pip install 'maskbench[hf]'") from None
    try:
        parquet = pq.ParquetFile(path)
    except pa.ArrowException as exc:
        raise ValueError(f"{path}: cannot be read as parquet ({exc}); is it a truncated download?") from exc
    if "text" not in parquet.schema_arrow.names:
        raise ValueError(f"{path}: no `text` column; columns found: {parquet.schema_arrow.names}")
    for batch in parquet.iter_batches(batch_size=PARQUET_BATCH, columns=["text"]):
        yield from batch.column(0).to_pylist()


HF_RECORDS = {".jsonl": _jsonl_texts, ".parquet": _parquet_texts}
CORPUS_READERS = {"wikitext": read_wikitext, "smiles_csv": read_smiles_csv, "hf_text": read_hf_text}


class SplitDocuments:
    """One split's documents, as a collection that is read from the raw files on every pass.

    Each part is a stream and which of its documents belong here (a boolean mask, or None for
    all of them); `len` is the number of documents, from the census. The tokenizer stage reads
    the train split twice (its characters, then the training itself), each time from disk."""

    def __init__(self, parts: list[tuple[Stream, np.ndarray | None]], count: int):
        self.parts, self.count = parts, count

    def __iter__(self) -> Iterator[str]:
        for stream, keep in self.parts:
            documents = stream(Counter())  # skipped ones were counted by the census
            yield from documents if keep is None else itertools.compress(documents, keep)

    def __len__(self) -> int:
        return self.count

    def __add__(self, other: SplitDocuments) -> SplitDocuments:
        return SplitDocuments(self.parts + other.parts, self.count + other.count)


def _joined(stream: Stream, most_chars: int, skipped: Counter) -> Iterator[str]:
    """`stream`'s records joined in order, with a space, into documents of up to `most_chars`
    characters (a record that alone is longer stays whole): for a corpus whose records are
    consecutive sentences of longer texts whose ends it does not mark (the hub's BookCorpus), so
    that a document is running text rather than one sentence."""
    document, length = [], 0
    for record in stream(skipped):
        if document and length + 1 + len(record) > most_chars:
            yield " ".join(document)
            document, length = [], 0
        length += len(record) + (1 if document else 0)
        document.append(record)
    if document:
        yield " ".join(document)


def census(streams: Mapping[str, Stream]) -> tuple[dict[str, int], Counter]:
    """One pass over every split: its number of documents, and the skipped ones per reason."""
    skipped = Counter()
    return {split: sum(1 for _ in stream(skipped)) for split, stream in streams.items()}, skipped


def drawn(total: int, count: int) -> np.ndarray:
    """Which of `total` documents a fixed seeded draw of `count` takes, as a boolean mask.

    The draw is the first `count` positions of `permutation(total)` under HOLDOUT_SEED, as when
    the readers returned lists. The positions are shuffled in place as int32 when they fit,
    which gives the same order for half the memory: 4 bytes per document while drawing, 1 after."""
    positions = np.arange(total, dtype=np.int32 if total < 2**31 else np.int64)
    np.random.Generator(np.random.PCG64(HOLDOUT_SEED)).shuffle(positions)
    mask = np.zeros(total, dtype=bool)
    mask[positions[:count]] = True
    return mask


def _within(keep: np.ndarray | None, chosen: np.ndarray) -> np.ndarray:
    """`chosen`, a mask over the documents `keep` selects, as a mask over all of them."""
    if keep is None:
        return chosen
    narrowed = keep.copy()
    narrowed[keep] = chosen
    return narrowed


def read_dataset(config: dict, name: str, raw_dir: Path) -> tuple[dict[str, SplitDocuments], Counter]:
    """One corpus dataset's documents per split (its records, or with `join_records` consecutive
    records joined), with a valid split carved from train if needed."""
    spec = config["datasets"][name]
    if spec["format"] not in CORPUS_READERS:
        raise ValueError(f"datasets.{name}: format {spec['format']!r} is not a corpus format; "
                         f"expected one of {sorted(CORPUS_READERS)}")
    streams = CORPUS_READERS[spec["format"]](raw_dir)
    if "join_records" in spec:
        streams = {split: partial(_joined, stream, spec["join_records"]) for split, stream in streams.items()}
    counts, skipped = census(streams)
    parts = {split: (stream, None) for split, stream in streams.items()}
    if "valid" not in parts and "valid_from_train" in spec:
        held = drawn(counts["train"], round(spec["valid_from_train"] * counts["train"]))
        parts["train"], parts["valid"] = (streams["train"], ~held), (streams["train"], held)
    if "valid" not in parts:
        raise ValueError(f"datasets.{name}: {raw_dir} has no valid split; set `valid_from_train` to hold one out")
    sizes = {split: counts[split] if keep is None else int(keep.sum()) for split, (_, keep) in parts.items()}
    if sizes["train"] > spec.get("max_train_documents", sizes["train"]):
        chosen = drawn(sizes["train"], spec["max_train_documents"])
        parts["train"] = (streams["train"], _within(parts["train"][1], chosen))
        skipped["beyond_max_train_documents"] += sizes["train"] - spec["max_train_documents"]
        sizes["train"] = spec["max_train_documents"]
    empty = [split for split in ("train", "valid") if split in sizes and not sizes[split]]
    if empty:
        raise ValueError(f"datasets.{name}: {raw_dir} gives no documents in split(s) {sorted(empty)} (documents per "
                         f"split: {sizes}, skipped: {dict(skipped)}); a corpus needs train and valid documents")
    return {split: SplitDocuments([part], sizes[split]) for split, part in parts.items()}, skipped


def read_corpus(config: dict, modality: str, raw_dirs: list[Path]) -> tuple[dict[str, SplitDocuments], dict]:
    """The documents of a modality's corpus per split (its datasets concatenated in order, read
    from `raw_dirs`, one per dataset), and per dataset the documents per split and the skipped
    ones per reason, for the data card. Only the census pass has run when this returns."""
    documents, card = {}, {}
    for name, raw_dir in zip(corpus_datasets(config, modality), raw_dirs, strict=True):
        parts, skipped = read_dataset(config, name, Path(raw_dir))
        for split, docs in parts.items():
            documents[split] = documents[split] + docs if split in documents else docs
        card[name] = {"documents": {split: len(docs) for split, docs in parts.items()},
                      "skipped": dict(sorted(skipped.items()))}
    return documents, card


def block_minimum(config: dict, modality: str) -> tuple[dict[str, int], str]:
    """The fewest tokens each split of `modality`'s streams needs to be cut into the blocks of
    every run that reads them, and why: a block's body is `seq_len - 2` tokens between [CLS]
    and [SEP], for the longest `seq_len` among the runs; training draws windows from train (it
    needs more than one body) and validation takes whole blocks from valid (at least one)."""
    seq_lens = {run: run_settings(config, run)["seq_len"] for run, spec in config["runs"].items()
                if spec["modality"] == modality}
    if not seq_lens:
        return {}, "no run reads this corpus"
    longest = max(seq_lens, key=seq_lens.get)
    body = seq_lens[longest] - 2
    return {"train": body + 1, "valid": body}, (f"to cut blocks of {seq_lens[longest]} tokens (runs.{longest}'s "
                                                f"seq_len, the longest on this corpus)")


def token_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


BATCH_CHARS = 1 << 20  # text per tokenizer call: its encodings take some 25 times the text's size


def batches(documents: Iterable[str], size: int, chars: int = BATCH_CHARS) -> Iterator[list[str]]:
    """`documents` in lists of `size`, cut short once they hold `chars` characters (Wikipedia's
    articles run from a line to 100 kB), read as they are needed."""
    batch, length = [], 0
    for document in documents:
        batch.append(document)
        length += len(document)
        if len(batch) == size or length >= chars:
            yield batch
            batch, length = [], 0
    if batch:
        yield batch


def tokenize_corpus(documents: Mapping[str, Collection[str]], tokenizer, out_dir: Path, batch: int = 1024,
                    min_tokens: tuple[dict[str, int], str] = ({}, "")) -> dict:
    """Write `<split>.bin` token streams, `meta.json` (dtype, vocabulary size, counts per
    split, `unigram_loss`) and the train stream's count per token id (TRAIN_COUNTS) into
    `out_dir` (atomically); a split with fewer tokens than `min_tokens` asks (the fewest per
    split, and what for: the tokenize stage's `block_minimum`) writes nothing.

    Documents are read, tokenized and appended to the file a batch at a time (`batch` documents,
    at most about BATCH_CHARS characters), and the token counts for the unigram loss summed as
    they go: memory stays O(batch + vocabulary) however large the corpus (`documents` may be
    lists or `read_corpus`'s SplitDocuments, which re-read the files)."""
    dtype = token_dtype(len(tokenizer))
    sep = tokenizer.sep_token_id
    stats, counts = {}, {}
    with atomic_path(out_dir, is_dir=True) as tmp:
        for split, docs in documents.items():
            tokens, seen, counts[split] = 0, 0, np.zeros(len(tokenizer), dtype=np.int64)
            progress = tqdm(total=len(docs), desc=f"tokenize {split}", unit="doc")
            # OutputFile, not numpy's tofile: a write the disk or the file-size limit stops is named
            # with its file and byte counts, where tofile says only "N requested and M written"
            with OutputFile(tmp / f"{split}.bin") as fh, progress:
                for texts in batches(docs, batch):
                    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
                    chunk = np.concatenate([np.asarray(ids + [sep], dtype=dtype) for ids in encoded])
                    fh.write(chunk)
                    tokens, seen = tokens + chunk.size, seen + len(texts)
                    counts[split] += np.bincount(chunk, minlength=len(tokenizer))
                    progress.update(len(texts))
            stats[split] = {"documents": seen, "tokens": tokens}
            fewest, needed_for = min_tokens[0].get(split, 0), min_tokens[1]
            if tokens < fewest:
                raise ValueError(f"{out_dir}/{split}.bin: {split} split has {tokens} tokens from {seen} documents; "
                                 f"at least {fewest} are needed {needed_for}: give the corpus more documents or "
                                 "the runs a shorter seq_len")
        meta = {"dtype": np.dtype(dtype).name, "vocab_size": len(tokenizer), "splits": stats,
                "unigram_loss": unigram_loss(counts["train"], counts["valid"], tokenizer.all_special_ids)}
        write_json(tmp / "meta.json", meta)
        np.save(tmp / TRAIN_COUNTS, counts["train"])
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
    log_p = unigram_log_probs(train_counts[text])
    valid_counts = valid_counts[text].astype(np.float64)
    return float(-(valid_counts * log_p).sum() / valid_counts.sum())


def unigram_log_probs(counts: np.ndarray) -> np.ndarray:
    """Log-probability of each token under its add-one smoothed frequency, from a count per token
    id: log((c + 1) / (N + V)), finite for a token never seen."""
    counts = counts.astype(np.float64)
    return np.log(counts + 1.0) - np.log(counts.sum() + counts.size)


def read_train_counts(tokens_dir: Path, vocab_size: int) -> np.ndarray:
    """The train stream's count per token id that the tokenize stage saved (TRAIN_COUNTS), for a
    vocabulary of `vocab_size` ids; a clear error where it is missing (streams tokenized before
    the stage saved it) or made with another vocabulary."""
    path = tokens_dir / TRAIN_COUNTS
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the token streams were made before the tokenize stage "
                                f"saved the train split's token counts; re-run `maskbench tokenize`")
    counts = np.load(path)
    if counts.shape != (vocab_size,):
        raise ValueError(f"{path}: counts for {counts.shape[0]} token ids, but the tokenizer has {vocab_size}; "
                         f"re-run `maskbench tokenize` with this tokenizer")
    return counts


def load_stream(tokens_dir: Path, split: str) -> np.memmap:
    """One split's token stream, memory-mapped, once its size matches its card (`meta.json`:
    the dtype and the split's token count): a truncated or swapped `<split>.bin` would
    otherwise train on what is left of it, or fail with numpy's words for a size."""
    with reading(tokens_dir / "meta.json"):
        meta = read_json(tokens_dir / "meta.json")
        dtype, counts = np.dtype(meta["dtype"]), {name: stream["tokens"] for name, stream in meta["splits"].items()}
    if split not in counts:
        raise ValueError(f"{tokens_dir}: no {split} stream; the tokenize stage writes {sorted(counts)}")
    tokens = counts[split]
    path = tokens_dir / f"{split}.bin"
    size = path.stat().st_size
    if size != tokens * dtype.itemsize:
        raise damaged(path, f"{size} bytes, but meta.json says {tokens} {dtype.name} tokens "
                            f"({tokens * dtype.itemsize} bytes): truncated or from another tokenization")
    return np.memmap(path, dtype=dtype, mode="r")
