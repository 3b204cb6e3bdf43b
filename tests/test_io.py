"""The stages' files (`maskbench.io`): a failed write keeps the old file, a directory is replaced
whole, a damaged input names the job that rebuilds it."""

from pathlib import Path

import pytest

from maskbench import paths
from maskbench.io import atomic_path, read_json, way_out, write_json
from maskbench.stages import STAGES


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


def test_every_output_names_the_job_of_its_own_stage():
    """`way_out` finds the job in `paths.OUTPUTS`, the stage table's outputs, with the wildcards
    in the order of the output's pattern: the same command the stage table spells. The index's
    files also fit a report table's pattern (reports/{table}.md) and are the index's."""
    assert list(paths.OUTPUTS) == list(STAGES)
    w = {"dataset": "wikitext2", "modality": "text", "task": "boolq", "run": "mlm", "seed": 3, "table": "table1"}
    for name, stage in STAGES.items():
        job = {k: w[k] for k in stage.wildcards}
        for output, path in stage.output_paths(job).items():
            rerun = f"re-run `{stage.command(job)}` (in the workflow: `snakemake --cores all {path} --forcerun {name}`)"
            assert way_out(path) == f"delete it and {rerun}", path
            if output in stage.directories:
                assert way_out(f"{path}/part.json") == f"delete the whole directory (`rm -r {path}`) and {rerun}"
