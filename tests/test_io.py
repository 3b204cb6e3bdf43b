"""Atomic writes (`maskbench.io`): a failed write keeps the old file, a directory is replaced whole."""

from pathlib import Path

import pytest

from maskbench.io import atomic_path, read_json, write_json


def test_failed_write_keeps_the_old_file(tmp_path: Path):
    target = tmp_path / "metrics.json"
    write_json(target, {"ok": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert read_json(target) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_directory_is_replaced_whole(tmp_path: Path):
    target = tmp_path / "model"
    with atomic_path(target, is_dir=True) as tmp:
        (tmp / "a").write_text("1")
    with atomic_path(target, is_dir=True) as tmp:
        (tmp / "b").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["b"]
