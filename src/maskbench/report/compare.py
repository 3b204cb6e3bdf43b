"""`maskbench compare TABLE REFERENCE`: did a rebuilt table reproduce its reference, exactly,
within the noise the reference measured, or not?

Both pages' markdown tables are read cell by cell (a cell is named by its table on the page,
its row's first cell and its column's header). A cell equal in both is reproduced; a row or a
column on one page only (a run added, a header reworded) is one difference. Where a cell
differs, its headline (its first number) is set against the noise of that cell: the
pretraining-seed spread a several-seed build measured for it (`[pretraining ± s, N seeds]`, or
the range `(a to b)` of the pretraining gap column, half of which counts as s), read from the
reference itself when it is such a build, else from the `noise` page (by default the
`tiny-3seeds` reference of the same table). One pretraining run of another CPU path is one more
draw of the method, so a difference up to `within` × s is noise. A cell with no measured noise
(a baseline, a published row, a cell without a number) reproduces only when equal.

The verdict is the last line: "reproduced" (every cell equal), "reproduced within the noise",
or the cells beyond it; `EXIT` gives the command's exit code for each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from maskbench import paths

EXIT = {"reproduced": 0, "beyond": 1, "within": 3}  # 2: bad input (as argparse)
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
PRETRAINING_SPREAD = re.compile(r"\[pretraining ± (\d+(?:\.\d+)?)")
RANGE = re.compile(r"\(([-+]?\d+(?:\.\d+)?) to ([-+]?\d+(?:\.\d+)?)\)")
CELL_SEPARATOR = re.compile(r"(?<!\\)\|")

Cells = dict[tuple[int, str, str], str]


class CompareError(ValueError):
    """A page that has no table to compare."""


@dataclass
class Difference:
    where: tuple[int, str | None, str | None]  # column None: the whole row; row None: the whole column
    ours: str | None
    reference: str | None
    delta: float | None = None
    noise: float | None = None
    within: bool = False

    def line(self) -> str:
        table, row, column = self.where
        place = ", ".join(([f"table {table + 1}"] if table else []) + ([f"row `{row}`"] if row is not None else [])
                          + ([f"column `{column}`"] if column is not None else []))
        if self.ours is None or self.reference is None:
            return f"- {place}: only in the {'reference' if self.ours is None else 'rebuilt table'}"
        said = f"- {place}: {self.ours!r} against the reference's {self.reference!r}"
        if self.delta is None:
            return said + " (no number to compare): beyond the noise"
        if self.noise is None:
            return said + f" ({self.delta:+g}; no noise measured for this cell): beyond the noise"
        return said + (f" ({self.delta:+g}, pretraining-seed spread {self.noise:g}): "
                       + ("within the noise" if self.within else "BEYOND the noise"))


def read_cells(page: Path) -> Cells:
    """Every cell of every markdown table of `page`, by (table, row, column)."""
    try:
        lines = page.read_text().splitlines()
    except OSError as exc:
        raise CompareError(f"{page}: cannot be read ({exc.strerror})") from exc
    cells, table, header = {}, -1, None
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            header = None
            continue
        parts = [c.strip() for c in CELL_SEPARATOR.split(line.strip())[1:-1]]
        if header is None:
            header, table = parts, table + 1
        elif set(line) <= set("|-: "):
            continue
        else:
            if len(parts) != len(header):
                raise CompareError(f"{page}, line {i + 1}: {len(parts)} cells under a header of {len(header)}")
            cells |= {(table, parts[0], column): cell for column, cell in zip(header[1:], parts[1:])}
    if not cells:
        raise CompareError(f"{page}: no markdown table (a page of `maskbench report` was expected)")
    return cells


def spread(cell: str | None) -> float | None:
    """The pretraining-seed spread a several-seed build wrote into `cell`, if any."""
    if cell is None:
        return None
    if found := PRETRAINING_SPREAD.search(cell):
        return float(found.group(1))
    if found := RANGE.search(cell):
        return (float(found.group(2)) - float(found.group(1))) / 2
    return None


def compare(ours: Cells, reference: Cells, noise: Cells, within: float) -> list[Difference]:
    """The cells that differ, each with its headline's difference and noise; a row or a column
    on one page only is one difference, not one per cell."""
    rows = {"ours": {k[:2] for k in ours}, "reference": {k[:2] for k in reference}}
    columns = {"ours": {(k[0], k[2]) for k in ours}, "reference": {(k[0], k[2]) for k in reference}}
    lone_rows, lone_columns = rows["ours"] ^ rows["reference"], columns["ours"] ^ columns["reference"]
    found = [Difference((*row, None), "" if row in rows["ours"] else None, "" if row in rows["reference"] else None)
             for row in sorted(lone_rows)]
    found += [Difference((table, None, column), "" if (table, column) in columns["ours"] else None,
                         "" if (table, column) in columns["reference"] else None)
              for table, column in sorted(lone_columns)]
    for where in sorted(ours.keys() | reference.keys(), key=str):
        a, b = ours.get(where), reference.get(where)
        if a == b or where[:2] in lone_rows or (where[0], where[2]) in lone_columns:
            continue
        difference = Difference(where, a, b)
        numbers = (NUMBER.search(a or ""), NUMBER.search(b or ""))
        if a is not None and b is not None and all(numbers):
            difference.delta = round(float(numbers[0].group()) - float(numbers[1].group()), 10)
            difference.noise = spread(b) if spread(b) is not None else spread(noise.get(where))
            difference.within = difference.noise is not None and abs(difference.delta) <= within * difference.noise
        found.append(difference)
    return found


def verdict(differences: list[Difference]) -> str:
    """'reproduced', 'within' or 'beyond' (EXIT's keys)."""
    if not differences:
        return "reproduced"
    return "within" if all(d.within for d in differences) else "beyond"


def report(table: Path, reference: Path, noise: Path | None, within: float) -> tuple[str, list[str]]:
    """(verdict, the lines that say it) for `table` against `reference`."""
    ours, theirs = read_cells(table), read_cells(reference)
    noise_cells = read_cells(noise) if noise is not None else {}
    differences = compare(ours, theirs, noise_cells, within)
    found = verdict(differences)
    source = (f"noise: the pretraining-seed spread of each cell in {noise}" if noise is not None else
              "noise: the pretraining-seed spread the reference's cells carry, where they do") + \
        f", a difference up to {within:g} × it counts as noise"
    lines = [f"{table} against {reference}: {len(theirs)} cells, {len(differences)} differ ({source})",
             *(d.line() for d in differences)]
    beyond = [d for d in differences if not d.within]
    lines.append({"reproduced": "reproduced",
                  "within": "reproduced within the noise",
                  "beyond": f"not reproduced: {len(beyond)} cell(s) beyond the noise"}[found])
    return found, lines


def default_noise(table: Path, reference: Path) -> Path | None:
    """The several-seed build of the reference's profile for the same table
    (reports/reference/<profile>-3seeds/<table>.md, as `tiny-3seeds` is tiny's), if there is one."""
    found = re.search(r"Profile `([^`]+)`", reference.read_text()) if reference.exists() else None
    candidate = Path(paths.REFERENCE.format(name=f"{found.group(1)}-3seeds/{table.name}")) if found else None
    return candidate if candidate is not None and candidate.exists() else None
