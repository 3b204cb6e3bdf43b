"""Every kind of table (`tables.<name>.kind` in params.yaml), each a module named after it that
holds its card (`CARD`, a `maskbench.report.table.TableKind`: label, columns, caption, the
heading over its claims) and its `render`, which takes (config, table, root, figures) and returns
the table's markdown with its verdicts on the claims of published.yaml its kind decides
(`Rendered`), drawing its figures into the directory `figures`. A new kind is one module and
one entry here (docs/adding-a-table-kind.md)."""

from __future__ import annotations

from pathlib import Path

from maskbench.config import table_kind
from maskbench.report import ablations, effective_rank, exlm_grid, look_around, objectives, repeated_mlm_grid
from maskbench.report.published import Rendered

KINDS = {kind.CARD.name: kind for kind in (objectives, repeated_mlm_grid, exlm_grid, effective_rank, ablations,
                                           look_around)}


def render(config: dict, table: str, root: Path, figures: Path) -> Rendered:
    return KINDS[table_kind(config, table)].render(config, table, root, figures)


def label(kind: str) -> str:
    """The kind as the index names it."""
    return KINDS[kind].CARD.label
