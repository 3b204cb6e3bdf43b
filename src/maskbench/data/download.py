"""The download stage: fetch one dataset's files and write its data card.

The card says what was fetched (package and version, hub repo, URL or path), and per file its
sha256, bytes and rows, so that a changed or truncated copy shows up in the card, not later as a
puzzling score. Rows are counted by the file's kind, read through `.gz`/`.bz2` as a stream:

    .csv           CSV records (quoted newlines stay inside their record) after the header row
    .tsv           non-blank lines after the header row (CoLA's official train/dev have none;
                   VADER's snippets are such a table, named .txt)
    .jsonl         non-blank lines, one record each (also every split the `hf` source saves)
    .txt, .raw     non-blank lines
    .json          SQuAD questions, data[].paragraphs[].qas[] (the file is parsed whole)
    .parquet       rows, from the file's footer (the hub's shards of a corpus)

Files of other kinds (archives, binaries) are listed under `bytes` but not counted. Files are
named by their path under the dataset's folder: a hub corpus keeps the hub's folder per config.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from maskbench.data import glue
from maskbench.data.rawfiles import RawFileError, compression_suffix, open_text
from maskbench.data.sources import fetch, files_under
from maskbench.io import atomic_path, write_json


def download(config: dict, dataset: str, out_dir: Path, card_path: Path, cache: Path) -> dict:
    """Fetch `dataset` (a params.yaml `datasets` entry) into `out_dir`, atomically."""
    spec = config["datasets"][dataset]
    with atomic_path(out_dir, is_dir=True) as tmp:
        provenance = fetch(spec["source"], tmp, cache, hub_parquet=spec["format"] in HUB_PARQUET_FORMATS,
                           key=f"datasets.{dataset}.source")
        try:
            rows = count_rows(tmp, SUFFIX_ALIASES.get(spec["format"], {}), _headerless_files(spec))
        except RawFileError as exc:
            fetched, origin = _origin(spec["source"], tmp, out_dir)
            raise RawFileError(str(exc).replace(str(fetched), str(origin))) from exc
        card = {
            "dataset": dataset,
            "role": spec["role"],
            "modality": spec["modality"],
            "format": spec["format"],
            "source": provenance,
            "bytes": {p.relative_to(tmp).as_posix(): p.stat().st_size for p in files_under(tmp)},
            "rows": rows,
        }
    write_json(card_path, card)
    return card


def _origin(source: dict, tmp: Path, out_dir: Path) -> tuple[Path, Path]:
    """The fetched copy (in `tmp`, deleted once the job fails) and what an error about it should
    name instead: the user's own file or folder for a local source, else the raw folder it was
    fetched for."""
    if source["kind"] == "local":
        path = Path(source["path"]).expanduser()
        return (tmp / path.name, path) if path.is_file() else (tmp, path)
    return tmp, out_dir


# formats whose reader streams the hub's parquet shards (maskbench.data.corpus.read_hf_text); the
# other hub formats read the JSON lines `datasets` exports
HUB_PARQUET_FORMATS = {"hf_text"}

# formats whose files are named otherwise than their kind: format -> {suffix: kind}
SUFFIX_ALIASES = {"vader": {".txt": ".tsv"}}


def _headerless_files(spec: dict) -> set[str]:
    """Table files of this dataset whose first line is already a record (CoLA's train/dev TSVs)."""
    return glue.headerless_files(spec["subset"]) if spec["format"] == "glue_tsv" else set()


def count_rows(folder: Path, aliases: Mapping[str, str], headerless: Collection[str]) -> dict[str, dict]:
    """Per countable file of `folder`: `{"count": n, "unit": what was counted}` (see the module
    docstring); `aliases` maps a file suffix to the kind it holds, `headerless` names the tables
    without a header row."""
    rows = {}
    for path in files_under(folder):
        suffix = Path(path.name.removesuffix(compression_suffix(path))).suffix
        kind = aliases.get(suffix, suffix)
        if kind in ROW_KINDS:
            counter, unit, has_header = ROW_KINDS[kind]
            count = counter(path)
            if has_header and path.name not in headerless:
                count, unit = max(count - 1, 0), f"{unit} after the header row"
            rows[path.relative_to(folder).as_posix()] = {"count": count, "unit": unit}
    return rows


def _csv_records(path: Path) -> int:
    """Records as pandas and the csv module parse them: a quoted field may span lines."""
    with open_text(path, newline="") as fh:
        return sum(1 for record in csv.reader(fh) if record)


def _nonblank_lines(path: Path) -> int:
    with open_text(path) as fh:
        return sum(1 for line in fh if line.strip())


def _squad_questions(path: Path) -> int:
    with open_text(path) as fh:
        document = json.load(fh)
    try:
        return sum(len(paragraph["qas"]) for article in document["data"] for paragraph in article["paragraphs"])
    except (KeyError, TypeError) as exc:
        raise RawFileError(f"{path}: expected SQuAD JSON (data[].paragraphs[].qas[]) to count its questions "
                           f"({type(exc).__name__}: {exc})") from exc


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


# file kind (suffix under any compression) -> (counter, unit, whether the first row is a header)
ROW_KINDS: dict[str, tuple[Callable[[Path], int], str, bool]] = {
    ".csv": (_csv_records, "CSV records", True),
    ".tsv": (_nonblank_lines, "tab-separated lines", True),
    ".jsonl": (_nonblank_lines, "JSON lines", False),
    ".txt": (_nonblank_lines, "non-blank lines", False),
    ".raw": (_nonblank_lines, "non-blank lines", False),
    ".json": (_squad_questions, "SQuAD questions", False),
    ".parquet": (_parquet_rows, "Parquet rows", False),
}
