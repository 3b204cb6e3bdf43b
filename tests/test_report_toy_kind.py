"""A toy kind of table, defined once below, reaches every layer that reads a kind: the schema
lets params.yaml name it, the report job plans its inputs, `maskbench.report.kinds` renders it
from its card with the cells, marks and verdicts every kind shares, and the index names it and
its claim. Each step the test takes is one that docs/adding-a-table-kind.md names."""

from __future__ import annotations

import copy
import types
from pathlib import Path

import pytest

from maskbench import paths, stages
from maskbench.config import read_yaml, schema_path, validate
from maskbench.config.load import ParamsError
from maskbench.report import index, kinds, markdown, published
from maskbench.report.cells import DID_NOT_LEARN_MARK, column_header
from maskbench.report.footer import closing_lines
from maskbench.report.published import Rendered
from maskbench.report.table import TASKS, TableKind, read_table

CARD = TableKind(name="toy", label="toy runs × tasks", columns=("run", TASKS),
                 caption="Profile `{profile}`, a toy. {did_not_learn}: did not learn ({note}).",
                 claims="The toy's claim, checked on our rows:")
CLAIM = {"id": "toy_mlm_beats_none", "claim": "MLM beats no pretraining", "source": "a toy",
         "decided_by": "toy", "statistic": "each"}


def render(config: dict, table: str, root: Path, figures: Path | None = None) -> Rendered:
    found = read_table(config, table, root)
    body = [[found.run_name(run), *(found.task_cell(run, t) for t in found.spec["tasks"])]
            for run in found.spec["runs"]]
    verdicts = [found.verdict(CLAIM["id"], "not computed: a toy decides nothing", found.spec["runs"])]
    lines = [*found.opening(CARD, note="as every kind says it"), *markdown.table(found.header(CARD), body)]
    return Rendered("\n".join(lines + closing_lines(config, table, root, figures, CARD.claims, verdicts)), verdicts)


TOY = types.SimpleNamespace(__name__="maskbench.report.toy", CARD=CARD, render=render)


@pytest.fixture
def toy(monkeypatch, raw_params):
    """The toy registered where the guide says (its module in `kinds.KINDS`, its name in the
    schema's enum, its analyses in the stage table, its claim in published.yaml); the profile
    given a table of it. Returns (config, schema)."""
    monkeypatch.setitem(kinds.KINDS, "toy", TOY)
    monkeypatch.setitem(paths.TABLE_ANALYSES, "toy", ())
    claims = {**published.load_published(), "claims": [*published.load_published()["claims"], CLAIM]}
    for module in (published, index):
        monkeypatch.setattr(module, "load_published", lambda: claims)
    schema = copy.deepcopy(read_yaml(schema_path()))
    kind = schema["properties"]["tables"]["additionalProperties"]["properties"]["kind"]
    kind["enum"] = [*kind["enum"], "toy"]
    raw_params["tables"]["table99"] = {"title": "A toy", "kind": "toy", "runs": ["none", "mlm"],
                                       "tasks": ["rotten_tomatoes"]}
    return validate(raw_params, schema, every_profile=False), schema


def test_a_kind_the_schema_does_not_list_is_refused_by_name(raw_params):
    raw_params["tables"]["table99"] = {"title": "A toy", "kind": "toy", "runs": ["mlm"], "tasks": ["rotten_tomatoes"]}
    with pytest.raises(ParamsError, match="table99.*kind.*toy|toy.*is not one of"):
        validate(raw_params, read_yaml(schema_path()), every_profile=False)


def test_a_toy_kind_reaches_every_layer(toy, tmp_path):
    config, _ = toy
    assert config["tables"]["table99"]["kind"] == "toy"                                   # the schema
    report_job = stages.job(config, "report", {"table": "table99"})                       # the stage table
    assert "runs/finetune/mlm/rotten_tomatoes/summary.json" in report_job.input["summaries"]
    text = kinds.render(config, "table99", tmp_path, None).markdown                       # card, shared cells
    assert text.startswith(f"# table99: A toy\n\nProfile `{config['profile']}`, a toy. {DID_NOT_LEARN_MARK}: did not "
                           "learn (as every kind says it).")
    assert f"| run | {column_header(config, 'rotten_tomatoes', None)} |" in text
    assert "| control: no pretraining (`none`) | not computed |" in text and "| mlm | not computed |" in text
    assert "The toy's claim, checked on our rows:\n- MLM beats no pretraining (a toy). Here: not computed" in text
    assert "Pretraining of the runs compared: not computed for `none`, `mlm`." in text  # the learning context
    page = index.render(config, tmp_path)                                              # the index and its scorecard
    assert any(line.startswith("| table99 | A toy | toy runs × tasks | not built |") for line in page.splitlines())
    assert any(line.startswith("- **MLM beats no pretraining**") for line in page.splitlines())
