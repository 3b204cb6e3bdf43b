"""Streaming data stages (`maskbench.data.corpus`, `maskbench.data.tokenizers`): documents are read
split by split from the raw files, never held as lists, and the streams, tokenizer and data card
are byte for byte what the list-based stages wrote.

The reference hashes below were produced by the list-based implementation (maskbench before the
streaming readers, commit 38c1f57) on the corpora `write_corpora` generates: a tiny one and one of
WikiText-2's size (2.7M train tokens), each a WikiText corpus plus a hub corpus with a held-out
valid split and a `max_train_documents` cut, and a SMILES corpus with both too.

Hub corpora (Wikipedia, BookCorpus) are read from the hub's parquet files, tested here on local
files in the hub's layout served by a stand-in for `huggingface_hub` (no network).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import types
from collections import Counter
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maskbench.data.corpus import read_corpus, read_dataset, read_hf_text, tokenize_corpus
from maskbench.data.download import download
from maskbench.data.sources import files_under
from maskbench.data.tokenizers import train_tokenizer

SYLLABLES = "ka ri to ne mu sa chi lo ve din por tal ex qui bra ste fel um on ar zé ñu ö ß th gr pl".split()
PUNCTUATION = [",", ".", ";", "(", ")", "'s", "@-@", "1", "19", "2024", "—"]
ATOMS = ["C", "C", "C", "N", "O", "c1ccccc1", "Cl", "Br", "[nH]", "[C@@H]", "S(=O)(=O)", "F", "C(=O)O", "[O-]"]


class Draws:
    """Uniform doubles from PCG64 (its bit stream is fixed across numpy versions) turned into
    choices by inverse CDF, so the generated corpus is the same on every machine."""

    def __init__(self, seed: int):
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def pick(self, cdf: np.ndarray, n: int) -> np.ndarray:
        return np.searchsorted(cdf, self.rng.random(n) * cdf[-1], side="right")

    def uniform(self, n: int, high: int) -> np.ndarray:
        return self.pick(np.arange(1, high + 1, dtype=np.float64), n)


def zipf_words(draws: Draws, size: int) -> tuple[list[str], np.ndarray]:
    """`size` made-up words (with accents, ß, ñ: the normalizer's work) plus punctuation, and the
    cumulative weights of a Zipf-like law over them."""
    cdf = np.cumsum(1.0 / (np.arange(size) + 2.7))
    lengths = draws.uniform(size, 4) + 1
    syllables = draws.uniform(int(lengths.sum()), len(SYLLABLES))
    words, at = [], 0
    for n in lengths:
        words.append("".join(SYLLABLES[i] for i in syllables[at:at + n]))
        at += n
    return words + PUNCTUATION, np.concatenate([cdf, cdf[-1] + np.cumsum(np.full(len(PUNCTUATION), 0.4))])


def sentence(draws: Draws, vocab: list[str], cdf: np.ndarray, n_words: int) -> list[str]:
    ids = draws.pick(cdf, n_words)
    caps = draws.rng.random(n_words) < 0.05
    return [vocab[i].capitalize() if c else vocab[i] for i, c in zip(ids, caps)]


def write_wikitext(raw: Path, draws: Draws, vocab: list[str], cdf: np.ndarray, articles: dict[str, int]) -> None:
    """`<split>.raw.gz` in WikiText's raw layout: titled articles, sections, paragraph lines."""
    raw.mkdir(parents=True, exist_ok=True)
    for split, count in articles.items():
        lines = []
        for a in range(count):
            lines += [" ", f" = Title {split} {a} = ", " "]
            for section in range(int(draws.uniform(1, 4)[0])):
                if section:
                    lines += [f" = = Section {section} = = ", " "]
                for _ in range(int(draws.uniform(1, 5)[0])):
                    words = sentence(draws, vocab, cdf, int(draws.uniform(1, 300)[0]) + 20)
                    if draws.rng.random() < 0.02:
                        words.insert(len(words) // 2, "x\u2028y")  # str.splitlines() breaks a line here too
                    lines.append(" " + " ".join(words) + " . ")
                lines.append(" ")
        (raw / f"{split}.raw.gz").write_bytes(gzip.compress("\n".join(lines).encode(), mtime=0))


def hub_records(draws: Draws, vocab: list[str], cdf: np.ndarray, count: int) -> list[dict]:
    """Hub-style records, some with empty text (skipped) and some with surrounding whitespace."""
    records = []
    for i in range(count):
        empty = draws.rng.random() < 0.03
        text = "" if empty else " ".join(sentence(draws, vocab, cdf, int(draws.uniform(1, 60)[0]) + 3))
        records.append({"id": str(i), "text": text if i % 7 else f"  {text}\n"})
    return records


def smiles_lines(draws: Draws, count: int) -> list[str]:
    """SMILES strings, about 1% empty and 1% unparsable."""
    lines = []
    for _ in range(count):
        u = draws.rng.random()
        if u < 0.01:
            lines.append("")
        elif u < 0.02:
            lines.append("C1CC(")
        else:
            atoms = draws.uniform(int(draws.uniform(1, 12)[0]) + 1, len(ATOMS))
            lines.append("".join(ATOMS[i] for i in atoms))
    return lines


def write_corpora(root: Path, scale: int) -> dict[str, list[Path]]:
    """Raw directories of a text corpus (WikiText + a hub dataset as JSON lines) and of a SMILES
    corpus, per modality; `scale` 1 is tiny, 300 is WikiText-2's size."""
    draws = Draws(1234)
    vocab, cdf = zipf_words(draws, 400 * scale)
    write_wikitext(root / "wikitext", draws, vocab, cdf, {"train": 6 * scale, "valid": 2 * scale, "test": 2 * scale})
    hub = root / "hub"
    hub.mkdir(parents=True, exist_ok=True)
    for split, count in {"train": 150 * scale, "test": 20 * scale}.items():
        (hub / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n"
                                                    for r in hub_records(draws, vocab, cdf, count)))
    smiles = root / "moses"
    smiles.mkdir(parents=True, exist_ok=True)
    train = "SMILES\n" + "\n".join(smiles_lines(draws, 300 * scale)) + "\n"
    (smiles / "train.csv.gz").write_bytes(gzip.compress(train.encode(), mtime=0))
    (smiles / "test.csv").write_text("smiles,other\n" + "".join(f"{s},1\n" for s in smiles_lines(draws, 30 * scale)))
    return {"text": [root / "wikitext", hub], "smiles": [smiles]}


def corpus_config(scale: int) -> dict:
    """The params.yaml sections the data stages read, for `write_corpora`'s datasets."""
    return {
        "corpora": {"text": ["wikitext2", "hub"], "smiles": "moses"},
        "datasets": {
            "wikitext2": {"format": "wikitext"},
            "hub": {"format": "hf_text", "valid_from_train": 0.05, "max_train_documents": 120 * scale},
            "moses": {"format": "smiles_csv", "valid_from_train": 0.1, "max_train_documents": 250 * scale},
        },
        "tokenizer": {"text": {"vocab_size": 2000, "min_frequency": 2, "lowercase": True},
                      "smiles": {"min_frequency": 1}},
    }


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def data_stages(config: dict, modality: str, raw_dirs: list[Path], out: Path) -> dict:
    """What the tokenizer and tokenize stages produce for `modality`, as hashes."""
    documents, card = read_corpus(config, modality, raw_dirs)
    tokenizer = train_tokenizer(modality, config["tokenizer"][modality], documents["train"], out / "tokenizer")
    meta = tokenize_corpus(documents, tokenizer, out / "tokens")
    return {
        "documents": {split: sha256("\x00".join(docs).encode()) for split, docs in documents.items()},
        "card": card,
        "tokenizer.json": sha256((out / "tokenizer/tokenizer.json").read_bytes()),
        "files": {p.name: sha256(p.read_bytes()) for p in sorted((out / "tokens").iterdir())},
        "unigram_loss": meta["unigram_loss"],
    }


# What the list-based stages produced (see the module docstring), per scale and modality; the SMILES
# entries re-pinned on 2026-11-27 when the tokenizer began cutting bracket atoms into their parts.
REFERENCE = {
    1: {
        "text": {
            "documents": {"train": "25dffa33bd579ced93115f0e4dac0ecfdd07e2a6a8d97cdbf2e269128595cd84",
                          "valid": "a76c9269e59e4121d5bd2b26108074016804648f5e339951ce7a674029a03c0c",
                          "test": "234d9f05056534601923dbf7ca38eda760fe2a9bbe043579e28f4ed9e1b633ee"},
            "card": {"wikitext2": {"documents": {"train": 6, "valid": 2, "test": 2}, "skipped": {}},
                     "hub": {"documents": {"test": 20, "train": 120, "valid": 7},
                             "skipped": {"beyond_max_train_documents": 15, "empty_text": 8}}},
            "tokenizer.json": "86fa839fa11a74c8bcaee46f0dd0a92a1cbc9e918fa6d1559725839350b00aaf",
            "files": {"meta.json": "3f9848b2dfbe917d6650da327449616e5a5cf088f35fe429a0324973d0d57a66",
                      "test.bin": "351bfd43bf9bb0c36fb4bca8578475dd06d107f7bae3217ef1d9631e18b154a2",
                      "train.bin": "af3ccc5836a8ffb827aff8e4b3b59592640384a3797809566432440d2642ce1f",
                      "train_counts.npy": "a500bf417e38302b8eb5233facfeb0facd541fef3ce39b9ebc14543a6be3929d",
                      "valid.bin": "b8ba4178adde9b20486dd26c138f971c1f76bb3e97054bf59e4135fc945c7914"},
            "unigram_loss": 4.446050853815702,
        },
        "smiles": {
            "documents": {"train": "11649652d8dd5a313ba836759b03545a7f069b0e44146d10e7ea527a4c3359b1",
                          "test": "2675d98de6f48e8e198e820b698c9bede9d418325c2713604179d8ca5645f0aa",
                          "valid": "81e46c964b04293fdce49143739e19403572815758e2e3cc20e41d0fdb9f2869"},
            "card": {"moses": {"documents": {"train": 250, "test": 29, "valid": 29},
                               "skipped": {"beyond_max_train_documents": 15, "empty_smiles": 3,
                                           "unparsable_smiles": 4}}},
            "tokenizer.json": "241069281fdf57ebb1b19d8dcc313706ed3d6a6d2614159dcd95fd8645a7f75f",
            "files": {"meta.json": "81ad6c37bdbf2806e21b0e33d6a3d0c6b38ebc18b9c05480d52f2c1c9ddc038d",
                      "test.bin": "f11e8879ce765990bf8968a581ffe5bf41e2d4f537a38f56f206e352fa1aaee2",
                      "train.bin": "58ee7668a704669cb99f87d4aa3765284503f204f341457609c15a450763249a",
                      "train_counts.npy": "1f31937b9b38cfad416301772bf19959759f439ef2237ab62357351475322891",
                      "valid.bin": "60fbe5b883789040f7632b9e44ec6305766336f0373e15c1d9f5544099634cd4"},
            "unigram_loss": 2.681586955397487,
        },
    },
    300: {
        "text": {
            "documents": {"train": "e1036236286f4c9e97da68ef4d31a06d5fc34be95aaa4b1e25bed8227a98c38b",
                          "valid": "602afdc8f3463761eccde3567a328506da0cfed95affbdbb26c7a0946140ae0c",
                          "test": "e52379cb271a9b674c004f69efde9e409b008bacbac3d6b3a465c1d55bfd8b29"},
            "card": {"wikitext2": {"documents": {"train": 1800, "valid": 600, "test": 600}, "skipped": {}},
                     "hub": {"documents": {"test": 5824, "train": 36000, "valid": 2183},
                             "skipped": {"beyond_max_train_documents": 5469, "empty_text": 1524}}},
            "tokenizer.json": "0ed006800f79eb35ca8e2ef7358dc80f407c79ce21b6eed3c2ed16896a7870ce",
            "files": {"meta.json": "ac6b016c43e9c8f2289c11226ab0f16e2afc57cc4bf14c7ee21498151dd71906",
                      "test.bin": "fe58b21c33bf399fadb40377c9c412b53f2f535d646b52e55519b69820fed81b",
                      "train.bin": "ec11a000c1a05e1b0f12f148bd851b4c0d71b631cc4ea3f4421ea33d0864b367",
                      "train_counts.npy": "11378a2aaec402855f2d3769946c4bf5684ca10460072ffc5df279c62ff79929",
                      "valid.bin": "0f5b82001a30edb55f88ed9235b377fc28f74b1e0f1c325ecc3e0383cd0dfcc6"},
            "unigram_loss": 5.9608418722147425,
        },
        "smiles": {
            "documents": {"train": "884ff9607dac58a1e6e8935808296557c29d3f8db9a8c1c8f8ffe37f66145400",
                          "test": "622fa4fa341be3ac17b77a19bad70606ded2e6e0a7727b025ab4e34fbdeb09e9",
                          "valid": "eb3d9468b1289d995f74b58110e9476a115f048afb3a39874199219fb5924797"},
            "card": {"moses": {"documents": {"train": 75000, "test": 8814, "valid": 8808},
                               "skipped": {"beyond_max_train_documents": 4267, "empty_smiles": 1066,
                                           "unparsable_smiles": 1045}}},
            "tokenizer.json": "241069281fdf57ebb1b19d8dcc313706ed3d6a6d2614159dcd95fd8645a7f75f",
            "files": {"meta.json": "935ebb6b738172e1f348569fb1752addec60128e10f6d0e6821d1bab93528460",
                      "test.bin": "d53ba3d9dba26499dc7843be407a0f0fa85c67c7ff1c53bfa691f6c748803bd5",
                      "train.bin": "65b855af4b9c0e839cf6db1547194495b7ac46ad6b68c80b74816eb569e16c73",
                      "train_counts.npy": "f0a8d62857dc867c7d6a4caeec63a19e7e695f065c4d2ebbddd0f18be8c0cb99",
                      "valid.bin": "c5fbc61da25bcdb32ebfa933155b2dcf11c64b4ca1d21beac98ef3e1920af295"},
            "unigram_loss": 2.6741452501157195,
        },
    },
}


@pytest.mark.parametrize("modality", ["text", "smiles"])
@pytest.mark.parametrize("scale", [1, pytest.param(300, marks=pytest.mark.slow)])
def test_streamed_stages_write_what_the_list_based_ones_wrote(tmp_path, scale, modality):
    """Same documents in the same splits (the held-out valid draw and the max_train_documents
    draw included), same data card, same tokenizer file, byte-identical streams and meta.json."""
    raw_dirs = write_corpora(tmp_path / "raw", scale)[modality]
    assert data_stages(corpus_config(scale), modality, raw_dirs, tmp_path / "out") == REFERENCE[scale][modality]


# --- hub corpora: parquet shards in the hub's layout ---------------------------------------------

def write_shards(folder: Path, split: str, records: list[dict], shards: int, row_group: int = 7) -> None:
    """`records` as the hub stores a split: `<split>-0000i-of-0000n.parquet`, small row groups."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(len(records)), shards)):
        table = pa.Table.from_pylist([records[j] for j in part])
        pq.write_table(table, folder / f"{split}-{i:05d}-of-{shards:05d}.parquet", row_group_size=row_group)


def fake_parquet_hub(monkeypatch, repos: dict[str, Path]) -> list[tuple]:
    """`huggingface_hub` serving each repo's files from a local folder (the same tree at every
    revision, whose commit is `commit-of-<revision>`); returns the calls made to it."""
    calls = []

    class HfApi:
        def dataset_info(self, repo, revision=None):
            calls.append(("dataset_info", repo, revision))
            return types.SimpleNamespace(sha=f"commit-of-{revision}")

    def snapshot_download(repo, repo_type, revision, local_dir, allow_patterns):
        calls.append(("snapshot_download", repo, repo_type, revision, allow_patterns))
        for path in files_under(repos[repo]):
            name = path.relative_to(repos[repo]).as_posix()
            if any(fnmatch(name, pattern) for pattern in allow_patterns):
                (Path(local_dir) / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, Path(local_dir) / name)
        (Path(local_dir) / ".cache/huggingface/download").mkdir(parents=True)  # what the real one leaves
        return str(local_dir)

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(HfApi=HfApi,
                                                                               snapshot_download=snapshot_download))
    return calls


def hub_config() -> dict:
    """params.yaml's wikipedia and bookcorpus entries, as a corpus of their own."""
    from maskbench.config import read_yaml

    datasets = read_yaml(Path(__file__).parents[1] / "params.yaml")["datasets"]
    return {"corpora": {"text": ["wikipedia", "bookcorpus"]},
            "datasets": {name: datasets[name] for name in ("wikipedia", "bookcorpus")}}


def test_hub_corpora_are_fetched_as_parquet_at_the_pinned_revision_and_streamed(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    write_shards(hub / "wikimedia/20231101.en", "train",
                 [{"id": str(i), "text": f"article {i}"} for i in range(400)], 2)
    write_shards(hub / "wikimedia/20231101.fr", "train", [{"id": "0", "text": "pas celui-ci"}], 1)  # another config
    (hub / "wikimedia/README.md").parent.mkdir(parents=True, exist_ok=True)
    (hub / "wikimedia/README.md").write_text("not data")
    write_shards(hub / "bookcorpus/plain_text", "train",
                 [{"text": f"sentence {i}"} for i in range(200)] + [{"text": ""}], 3)
    calls = fake_parquet_hub(monkeypatch,
                             {"wikimedia/wikipedia": hub / "wikimedia", "bookcorpus/bookcorpus": hub / "bookcorpus"})
    config = hub_config()
    for name in ("wikipedia", "bookcorpus"):
        download(config, name, tmp_path / f"raw/{name}", tmp_path / f"cards/{name}.json", tmp_path / "cache")

    assert ("dataset_info", "bookcorpus/bookcorpus", "refs/convert/parquet") in calls
    assert ("snapshot_download", "bookcorpus/bookcorpus", "dataset", "commit-of-refs/convert/parquet",
            ["plain_text/*.parquet"]) in calls
    card = json.loads((tmp_path / "cards/wikipedia.json").read_text())
    assert card["source"]["commit"] == "commit-of-main" and card["source"]["revision"] == "main"
    shards = ["20231101.en/train-00000-of-00002.parquet", "20231101.en/train-00001-of-00002.parquet"]
    assert sorted(card["source"]["files"]) == sorted(card["bytes"]) == shards  # no README, no .cache, no fr
    assert [card["rows"][s]["count"] for s in shards] == [200, 200]

    assert config["datasets"]["bookcorpus"].pop("join_records")  # a document a record here; joined: the test below
    documents, card = read_corpus(config, "text", [tmp_path / "raw/wikipedia", tmp_path / "raw/bookcorpus"])
    assert card["wikipedia"]["documents"] == {"train": 398, "valid": 2}
    assert card["bookcorpus"] == {"documents": {"train": 199, "valid": 1}, "skipped": {"empty_text": 1}}
    train = list(documents["train"])
    assert len(train) == len(documents["train"]) == 597 and train[0] == "article 0" and train[-1] == "sentence 199"
    assert train == list(documents["train"])  # every pass reads the same documents


def test_parquet_shards_give_what_json_lines_gave(tmp_path):
    """The hub dataset of `write_corpora` as parquet shards (row groups of 7 records) instead of
    JSON lines: the same documents, tokenizer and streams as the reference."""
    raw_dirs = write_corpora(tmp_path / "raw", 1)["text"]
    hub = raw_dirs[1]
    for split in ("train", "test"):
        records = [json.loads(line) for line in (hub / f"{split}.jsonl").read_text().splitlines()]
        (hub / f"{split}.jsonl").unlink()
        write_shards(hub / "default", split, records, 3)
    assert data_stages(corpus_config(1), "text", raw_dirs, tmp_path / "out") == REFERENCE[1]["text"]


@pytest.mark.parametrize("name, split", [("20231101.en/train-00000-of-00041.parquet", "train"),
                                         ("plain_text/bookcorpus-train-00003-of-00013.parquet", "train"),
                                         ("plain_text/train/0000.parquet", "train"),
                                         ("default/validation-00000-of-00001.parquet", "valid"),
                                         ("test.jsonl", "test")])
def test_hub_file_names_give_their_split(tmp_path, name, split):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": ["one document"]}), path) if path.suffix == ".parquet" else path.write_text(
        '{"text": "one document"}\n')
    if split != "train":
        write_shards(tmp_path / "other", "train", [{"text": "a train document"}], 1)
    streams = read_hf_text(tmp_path)
    assert list(streams[split](Counter())) == ["one document"]


def test_hub_files_of_unknown_split_or_without_text_are_named(tmp_path):
    write_shards(tmp_path / "plain_text/partial-train", "x", [{"text": "a"}], 1)
    with pytest.raises(ValueError, match=r"partial-train/x-00000-of-00001\.parquet: unknown split"):
        read_hf_text(tmp_path)
    shutil.rmtree(tmp_path / "plain_text")
    write_shards(tmp_path / "en", "train", [{"title": "a", "body": "b"}], 1)
    with pytest.raises(ValueError,
                       match=r"train-00000-of-00001\.parquet: no `text` column; columns found: \['title', 'body'\]"):
        list(read_hf_text(tmp_path)["train"](Counter()))


def test_join_records_makes_running_text_of_consecutive_sentences(tmp_path):
    """The hub's BookCorpus has one sentence a record and no book ends: `join_records` joins
    consecutive records, in order, into documents of up to that many characters, so no [SEP]
    falls between sentences and a `documents` block is running text."""
    sentences = {split: [f"{split} sentence number {i} ." for i in range(n)]
                 for split, n in (("train", 300), ("valid", 40))}
    for split, lines in sentences.items():
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in lines))
    spec = {"role": "corpus", "modality": "text", "format": "hf_text"}
    separate, _ = read_dataset({"datasets": {"books": spec}}, "books", tmp_path)
    assert list(separate["train"]) == sentences["train"]  # without it, a document a record
    joined, _ = read_dataset({"datasets": {"books": {**spec, "join_records": 200}}}, "books", tmp_path)
    for split, lines in sentences.items():
        documents = list(joined[split])
        assert " ".join(documents) == " ".join(lines) and len(joined[split]) == len(documents)
        assert all(len(d) <= 200 for d in documents)
        assert all(len(a) + 1 + len(b.split(" .")[0]) + 2 > 200 for a, b in zip(documents, documents[1:]))  # full
    assert len(list(joined["train"])) < len(sentences["train"]) / 5


# --- bounded memory ---------------------------------------------------------------------------

STAGES_IN_A_CHILD = """
import json, resource, sys
from pathlib import Path
from maskbench.data.corpus import read_corpus, tokenize_corpus
from maskbench.data.tokenizers import train_tokenizer

def stages(config, raw, out):
    documents, _ = read_corpus(config, "text", [raw])
    tokenizer = train_tokenizer("text", config["tokenizer"]["text"], documents["train"], out / "tokenizer")
    return tokenize_corpus(documents, tokenizer, out / "tokens")

config, warmup, raw, out = json.loads(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
stages(config, warmup, out / "warmup")  # imports and first-use allocations, before the baseline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
meta = stages(config, raw, out / "corpus")
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before_kib": before, "after_kib": after, "splits": meta["splits"]}))
"""


def write_big_hub_corpus(folder: Path, documents: int, shards: int) -> int:
    """`documents` distinct hub documents of ~5 kB (a pool of generated texts, each numbered) as
    parquet shards written one at a time; returns the bytes of text written."""
    draws = Draws(7)
    vocab, cdf = zipf_words(draws, 20_000)
    pool = [" ".join(sentence(draws, vocab, cdf, 800)) for _ in range(500)]
    folder.mkdir(parents=True)
    total = 0
    for shard, part in enumerate(np.array_split(np.arange(documents), shards)):
        texts = [f"document {i} {pool[i % len(pool)]}" for i in part]
        total += sum(len(t.encode()) for t in texts)
        pq.write_table(pa.table({"text": texts}), folder / f"train-{shard:05d}-of-{shards:05d}.parquet",
                       row_group_size=1000)
    return total


@pytest.mark.slow
def test_data_stages_peak_memory_does_not_grow_with_the_corpus(tmp_path):
    """The tokenizer and tokenize stages over a hub corpus of 66 MiB of text (12 parquet shards,
    valid held out of train) grow the process's peak memory by less than a fifth of that.

    Measured in a child process by its own peak resident set (`getrusage(RUSAGE_SELF).ru_maxrss`:
    exact, no sampling thread) after a warm-up run of the same stages on a small corpus with
    row groups and batches as large, so imports and first-use allocations (torch via
    transformers, the tokenizers and Arrow thread pools and their arenas) are in the baseline and
    the growth is what the corpus itself costs. An address-space limit (RLIMIT_AS) is not used:
    torch and the thread pools reserve far more address space than they touch. On a corpus of
    131 MiB the list-based stages (38c1f57) grew by 536 MiB; the streamed ones do not rise above the
    warm-up's peak on 9 MiB of text (growth 0 MiB), so their peak does not depend on the corpus."""
    corpus_bytes = write_big_hub_corpus(tmp_path / "raw/hub/en", documents=15_000, shards=12)
    write_big_hub_corpus(tmp_path / "raw/warmup/en", documents=2000, shards=2)  # row groups as large
    config = {"corpora": {"text": ["hub"]}, "datasets": {"hub": {"format": "hf_text", "valid_from_train": 0.01}},
              "tokenizer": {"text": {"vocab_size": 4000, "min_frequency": 2, "lowercase": True}}}
    result = subprocess.run([sys.executable, "-c", STAGES_IN_A_CHILD, json.dumps(config), tmp_path / "raw/warmup",
                             tmp_path / "raw/hub", tmp_path / "out"], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(result.stdout.splitlines()[-1])
    growth = (measured["after_kib"] - measured["before_kib"]) * 1024
    assert measured["splits"]["train"]["documents"] + measured["splits"]["valid"]["documents"] == 15_000
    print(f"peak RSS growth {growth / 2**20:.0f} MiB over {corpus_bytes / 2**20:.0f} MiB of text: {measured}")
    assert corpus_bytes > 65e6 and growth < corpus_bytes / 5, (growth, corpus_bytes, measured)
