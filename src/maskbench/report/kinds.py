"""Which module renders each kind of table (`tables.<name>.kind` in params.yaml), each named after
its kind: each takes (config, table, root, figures) and returns the table's markdown with its
verdicts on the claims of published.yaml its kind decides (`Rendered`), drawing its figures into
the directory `figures`."""

from __future__ import annotations

from pathlib import Path

from maskbench.config import table_kind
from maskbench.report import ablations, effective_rank, exlm_grid, look_around, objectives, repeated_mlm_grid
from maskbench.report.published import Rendered

RENDERERS = {"objectives": objectives.render, "repeated_mlm_grid": repeated_mlm_grid.render,
             "exlm_grid": exlm_grid.render, "effective_rank": effective_rank.render,
             "ablations": ablations.render, "look_around": look_around.render}


def render(config: dict, table: str, root: Path, figures: Path) -> Rendered:
    return RENDERERS[table_kind(config, table)](config, table, root, figures)
