"""What `snakemake --report reports/report.html built` shows: the tables built so far, and the index.

Snakemake's report gathers the files marked `report()` among the inputs and outputs of every job
its targets need, and stops at the first that is not built; its default target needs every
table. So no rule's output is marked: the `built`, `all` and `reports` targets take, as inputs
marked for the report, the pages that exist when Snakemake builds its DAG (workflow/rules/common.smk):
each built table's page and figures, and an index page made then from the tables' cards
(`index_page`), whether or not the index stage ran. A report made after table1 alone holds
table1, its figures and an index where the other tables are "not built".

This module imports only what the Snakefile imports already: the index is rendered (a second or
two of imports) only when its page is older than what it is made of.
"""

from __future__ import annotations

from pathlib import Path

from maskbench import paths
from maskbench.io import write_text


def built_tables(config: dict, root: Path) -> list[str]:
    """The tables of the profile whose page is built under `root`, in params.yaml's order."""
    return [table for table in config["tables"] if (root / paths.REPORT_HTML.format(table=table)).is_file()]


def index_page(config: dict, root: Path, params: Path) -> Path:
    """The report's index page under `root` (`maskbench.report.index.report_page`), rendered
    again when a card, the reports folder (a card added or removed) or `params` (the profile and
    its tables) is newer than it."""
    page = root / paths.REPORT_INDEX_PAGE
    sources = [params, root / Path(paths.REPORT_CARD).parent,
               *(root / paths.REPORT_CARD.format(table=table) for table in config["tables"])]
    newest = max((source.stat().st_mtime for source in sources if source.exists()), default=0.0)
    if not page.exists() or page.stat().st_mtime < newest:
        from maskbench.report.index import report_page

        write_text(page, report_page(config, root))
    return page
