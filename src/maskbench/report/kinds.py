"""Which module renders each kind of table (`tables.<name>.kind` in params.yaml): each takes
(config, table, root, figures) and returns the table's markdown with its verdicts on the claims
of published.yaml its kind decides (`Rendered`), drawing its figures into the directory
`figures`."""

from __future__ import annotations

from pathlib import Path

from maskbench.config import table_kind
from maskbench.report import (
    ablations,
    corruption_grid,
    effective_rank,
    expanded_states,
    look_around,
    tables,
)
from maskbench.report.published import Rendered

RENDERERS = {"objectives": tables.render, "repeated_mlm_grid": corruption_grid.render,
             "exlm_grid": expanded_states.render, "effective_rank": effective_rank.render,
             "ablations": ablations.render, "look_around": look_around.render}


def render(config: dict, table: str, root: Path, figures: Path) -> Rendered:
    return RENDERERS[table_kind(config, table)](config, table, root, figures)
