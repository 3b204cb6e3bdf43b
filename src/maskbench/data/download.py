"""The download stage: fetch one dataset's files and write its data card."""

from __future__ import annotations

from pathlib import Path

from maskbench.data.sources import fetch
from maskbench.io import atomic_path, write_json


def download(config: dict, dataset: str, out_dir: Path, card_path: Path, cache: Path) -> dict:
    """Fetch `dataset` (a params.yaml `datasets` entry) into `out_dir`, atomically."""
    spec = config["datasets"][dataset]
    with atomic_path(out_dir, is_dir=True) as tmp:
        provenance = fetch(spec["source"], tmp, cache)
        card = {
            "dataset": dataset,
            "role": spec["role"],
            "modality": spec["modality"],
            "format": spec["format"],
            "source": provenance,
            "bytes": {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()},
        }
    write_json(card_path, card)
    return card
