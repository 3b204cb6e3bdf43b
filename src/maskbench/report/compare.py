"""`maskbench compare TABLE REFERENCE`: did a rebuilt table reproduce its reference, exactly,
within the noise the reference measured, or not?

First the two footers (maskbench.report.arithmetic): the arithmetic each page's jobs computed
with, and the profile, git commit and params hash each was generated from. On the same
arithmetic a build repeats bit for bit, so every cell must be identical and any difference is
"not reproduced". On another arithmetic (another CPU path, library build, thread count or mode,
or a footer that does not say) a pretraining run is one more draw of the method, so the first
line names both arithmetics and each differing cell is judged against the noise of its row:

- a trained run (pretrained, or the `none` control's seeded initialisation): its headline (the
  cell's first number) against the pretraining-seed spread a several-seed build measured for it
  (`[pretraining ± s, N seeds]`, or the range `(a to b)` of the pretraining column, half of which
  counts as s), read from the reference itself when it is such a build, else from the `noise`
  page (by default the `tiny-3seeds` reference of the same table), matched by row and task (the
  header before its " — ", so a metric's reworded unit does not lose it); a difference up to
  `within` × s is noise. The rest of the cell (its seeds' std, its probe, its markers) follows the
  same pretraining draw and is not judged apart. Where no spread was measured: "not judged".
- a baseline (majority class, train positive rate, ECFP4 + a linear model): no pretraining and no
  float32 training loop, only a converged float64 fit whose last bits another BLAS kernel rounds
  otherwise; that moves a score by far less than its printed precision, so a printed number may
  move by one unit of its last digit (where it straddles a rounding boundary) and no more.
- a published row and the [UNK] counts: transcribed numbers and token counts, no floating-point
  path at all: exact.

A row or a column on one page only (a run added, a header reworded) is one difference. The
verdict is the last line: "reproduced" (every cell equal), "reproduced within the noise" (and how
many cells were not judged), or the cells beyond it; `EXIT` gives the command's exit code for each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from maskbench import paths
from maskbench.report import arithmetic

EXIT = {"reproduced": 0, "beyond": 1, "within": 3}  # 2: bad input (as argparse)
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
PRETRAINING_SPREAD = re.compile(r"\[pretraining ± (\d+(?:\.\d+)?)")
RANGE = re.compile(r"\(([-+]?\d+(?:\.\d+)?) to ([-+]?\d+(?:\.\d+)?)\)")
MANIFEST = paths.REFERENCE.format(name="references.yaml")
CELL_SEPARATOR = re.compile(r"(?<!\\)\|")
TASK_OF_HEADER = " — "  # a task column's header: its task's label, then its metric and seeds
# The rows the report writes for what no training computed (maskbench.report.cells.baseline_rows,
# maskbench.report.objectives.published_row and UNKNOWN_ROW; tests/test_compare.py finds each
# on the committed reference page).
BASELINE_ROW = "baseline: "
EXACT_ROWS = ("published: ", "tokens read as [UNK]")
TITLE = re.compile(r"^# (\w+):", re.MULTILINE)  # a page's first line: "# table1: Objectives × ..."
FOOTER = {"profile": re.compile(r"Profile `([^`]+)`"), "git commit": re.compile(r"from git commit `([^`]+)`"),
          "params hash": re.compile(r"params hash `([^`]+)`")}

Cells = dict[tuple[int, str, str], str]


class CompareError(ValueError):
    """A page that has no table to compare."""


@dataclass
class Page:
    """A page's cells and what its footer says it came from."""
    path: Path
    cells: Cells
    arithmetic: list[str] | None  # the footer's phrases (maskbench.report.arithmetic); None: not said
    provenance: dict[str, str | None]

    def arithmetic_said(self) -> str:
        return "; ".join(self.arithmetic) if self.arithmetic else "an arithmetic its footer does not record"


@dataclass
class Difference:
    where: tuple[int, str | None, str | None]  # column None: the whole row; row None: the whole column
    ours: str | None
    reference: str | None
    delta: float | None = None
    tolerance: float | None = None  # the largest difference that counts as noise; None: not judged
    basis: str = "no number to compare"  # what the tolerance is
    judged: str = "beyond"  # "within", "beyond", "not judged", or "differs" (on the same arithmetic)

    def line(self) -> str:
        table, row, column = self.where
        place = ", ".join(([f"table {table + 1}"] if table else []) + ([f"row `{row}`"] if row is not None else [])
                          + ([f"column `{column}`"] if column is not None else []))
        if self.ours is None or self.reference is None:
            return f"- {place}: only in the {'reference' if self.ours is None else 'rebuilt table'}"
        said = f"- {place}: {self.ours!r} against the reference's {self.reference!r}"
        delta = "" if self.delta is None else f"{self.delta:+g}, "
        verdict = {"within": "within the noise", "beyond": "BEYOND the noise", "not judged": "not judged",
                   "differs": "DIFFERS"}[self.judged]
        return f"{said} ({delta}{self.basis}): {verdict}"


def read_page(page: Path) -> Page:
    """`page`'s cells (every cell of every markdown table, by (table, row, column)) and footer."""
    try:
        text = page.read_text()
    except OSError as exc:
        raise CompareError(f"{page}: cannot be read ({exc.strerror})") from exc
    cells, table, header = {}, -1, None
    for i, line in enumerate(text.splitlines()):
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
    provenance = {name: (found.group(1) if (found := pattern.search(text)) else None)
                  for name, pattern in FOOTER.items()}
    return Page(page, cells, arithmetic.read(text), provenance)


def read_cells(page: Path) -> Cells:
    """Every cell of every markdown table of `page`, by (table, row, column)."""
    return read_page(page).cells


def spread(cell: str | None) -> float | None:
    """The pretraining-seed spread a several-seed build wrote into `cell`, if any."""
    if cell is None:
        return None
    if found := PRETRAINING_SPREAD.search(cell):
        return float(found.group(1))
    if found := RANGE.search(cell):
        return (float(found.group(2)) - float(found.group(1))) / 2
    return None


def by_task(cells: Cells) -> Cells:
    """`cells` keyed by (table, row, task) instead of the whole header (TASK_OF_HEADER)."""
    return {(table, row, column.split(TASK_OF_HEADER)[0]): cell for (table, row, column), cell in cells.items()}


def last_digit(number: str) -> float:
    """One unit of the last digit `number` prints (0.1 for "83.9", 1 for "50")."""
    return 10.0 ** -len(number.partition(".")[2])


def judge(difference: Difference, noise: Cells, within: float) -> None:
    """Set `difference`'s tolerance and verdict by its row's kind (the module's docstring);
    `noise` is keyed by task (`by_task`)."""
    table, row, column = difference.where
    numbers = (NUMBER.findall(difference.ours or ""), NUMBER.findall(difference.reference or ""))
    if not all(numbers):
        return
    difference.delta = round(float(numbers[0][0]) - float(numbers[1][0]), 10)
    measured = spread(difference.reference)
    if measured is None:
        measured = spread(noise.get((table, row, column.split(TASK_OF_HEADER)[0])))
    if row.startswith(EXACT_ROWS):
        difference.tolerance, difference.basis = 0.0, "transcribed or counted, no arithmetic: exact"
    elif row.startswith(BASELINE_ROW):
        if len(numbers[0]) != len(numbers[1]):
            difference.basis = "a baseline whose cells hold different numbers"
            return
        difference.tolerance = max(last_digit(n) for n in numbers[1])
        difference.basis = f"a baseline, no pretraining: one unit of its last digit, {difference.tolerance:g}"
        difference.delta = max((round(float(x) - float(y), 10) for x, y in zip(*numbers)), key=abs)
    elif measured is not None:
        difference.tolerance, difference.basis = within * measured, f"pretraining-seed spread {measured:g}"
    else:
        difference.basis, difference.judged = "no noise measured for this cell", "not judged"
        return
    difference.judged = "within" if abs(difference.delta) <= difference.tolerance else "beyond"


def compare(ours: Cells, reference: Cells, noise: Cells, within: float, same_arithmetic: bool = False
            ) -> list[Difference]:
    """The cells that differ, each judged: on the same arithmetic every one is beyond; on another
    by its row's noise (`judge`). A row or a column on one page only is one difference, not one
    per cell."""
    rows = {"ours": {k[:2] for k in ours}, "reference": {k[:2] for k in reference}}
    columns = {"ours": {(k[0], k[2]) for k in ours}, "reference": {(k[0], k[2]) for k in reference}}
    lone_rows, lone_columns = rows["ours"] ^ rows["reference"], columns["ours"] ^ columns["reference"]
    found = [Difference((*row, None), "" if row in rows["ours"] else None, "" if row in rows["reference"] else None)
             for row in sorted(lone_rows)]
    found += [Difference((table, None, column), "" if (table, column) in columns["ours"] else None,
                         "" if (table, column) in columns["reference"] else None)
              for table, column in sorted(lone_columns)]
    noise = by_task(noise)
    for where in sorted(ours.keys() | reference.keys(), key=str):
        a, b = ours.get(where), reference.get(where)
        if a == b or where[:2] in lone_rows or (where[0], where[2]) in lone_columns:
            continue
        difference = Difference(where, a, b)
        if same_arithmetic:
            difference.basis, difference.judged = "the same arithmetic computes the same bits", "differs"
        else:
            judge(difference, noise, within)
        found.append(difference)
    return found


def verdict(differences: list[Difference]) -> str:
    """'reproduced', 'within' or 'beyond' (EXIT's keys)."""
    if not differences:
        return "reproduced"
    return "beyond" if any(d.judged in ("beyond", "differs") for d in differences) else "within"


def heading(ours: Page, reference: Page, same_arithmetic: bool, noise: Path | None, within: float) -> list[str]:
    """The first lines: which arithmetic each page computed with and so how its cells are judged,
    then what else of the two footers differs (profile first: another profile is another table)."""
    if same_arithmetic:
        first = (f"same arithmetic ({ours.arithmetic_said()}): the reference repeats bit for bit, so every cell "
                 "must be identical")
    else:
        source = (f"in {noise}" if noise is not None else "that the reference's cells carry") + \
            f"; a difference up to {within:g} × it counts as noise"
        first = (f"OTHER ARITHMETIC: {ours.path} was computed on {ours.arithmetic_said()}; {reference.path} on "
                 f"{reference.arithmetic_said()}. A rebuild on another arithmetic is one more draw of the "
                 f"pretraining, so each differing cell is judged against the pretraining-seed spread {source} "
                 "(baselines: one unit of the last digit; published rows and counts: exact)")
    lines = [first]
    for name, value in ours.provenance.items():
        theirs = reference.provenance[name]
        if value != theirs:
            lines.append(f"other {name}: {ours.path} `{value}`, {reference.path} `{theirs}`"
                         + (" (another profile builds another table: its cells are not expected to match)"
                            if name == "profile" else ""))
    return lines


def report(table: Path, reference: Path, noise: Path | None, within: float, picked: str | None = None
           ) -> tuple[str, list[str]]:
    """(verdict, the lines that say it) for `table` against `reference` (`picked`: how
    `pick_reference` chose it, said after the footers' lines)."""
    ours, theirs = read_page(table), read_page(reference)
    same_arithmetic = arithmetic.same(ours.arithmetic, theirs.arithmetic)
    noise_cells = read_cells(noise) if noise is not None and not same_arithmetic else {}
    differences = compare(ours.cells, theirs.cells, noise_cells, within, same_arithmetic)
    found = verdict(differences)
    unjudged = sum(d.judged == "not judged" for d in differences)
    beyond = sum(d.judged in ("beyond", "differs") for d in differences)
    lines = [*heading(ours, theirs, same_arithmetic, noise, within), *([picked] if picked else []),
             f"{table} against {reference}: {len(theirs.cells)} cells, {len(differences)} differ",
             *(d.line() for d in differences)]
    not_judged = f"{unjudged} cell(s) not judged (no noise measured)" if unjudged else ""
    lines.append({"reproduced": "reproduced",
                  "within": "reproduced within the noise" + (f" ({not_judged})" if unjudged else ""),
                  "beyond": (f"not reproduced: {beyond} cell(s) "
                             + ("differ on the same arithmetic" if same_arithmetic else "beyond the noise")
                             + (f"; {not_judged}" if unjudged else ""))}[found])
    return found, lines


def default_noise(table: Path, reference: Path) -> Path | None:
    """The several-seed build of the reference's profile for the same table
    (reports/reference/<profile>-3seeds/<table>.md, as `tiny-3seeds` is tiny's), if there is one;
    the table named by the reference's title, so that a reference compared with another
    (table1-tiny-intel.md) finds it too."""
    text = reference.read_text() if reference.exists() else ""
    found, title = FOOTER["profile"].search(text), TITLE.search(text)
    name = f"{title.group(1)}.md" if title else table.name
    candidate = Path(paths.REFERENCE.format(name=f"{found.group(1)}-3seeds/{name}")) if found else None
    return candidate if candidate is not None and candidate.exists() else None


def pick_reference(table: Path, manifest: Path = Path(MANIFEST)) -> tuple[Path, str]:
    """The current reference (`manifest`'s `current`) of `table`'s profile and table computed on
    `table`'s arithmetic, where there is one, else the first of that profile and table: a table
    may have a reference per CPU path (the same build on native paths of an AVX2 and an AVX-512
    CPU), and only the one on the same arithmetic can be demanded bit for bit. Returns it and a
    line saying how it was picked."""
    ours = read_page(table)
    try:
        current = yaml.safe_load(manifest.read_text())["current"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise CompareError(f"{manifest}: no `current` references to pick from ({exc})") from exc
    profile, name = ours.provenance["profile"], table.stem
    candidates = [manifest.parent / page for page, entry in current.items()
                  if (entry or {}).get("profile") == profile and (entry or {}).get("table") == name]
    if not candidates:
        raise CompareError(f"{manifest}: no current reference of profile `{profile}` for {name} (the profile and "
                           f"table of {table}); name the reference to compare with")
    for candidate in candidates:
        if arithmetic.same(ours.arithmetic, read_page(candidate).arithmetic):
            return candidate, f"reference: {candidate}, the current {name} of `{profile}` on the same arithmetic"
    return candidates[0], (f"reference: {candidates[0]}: none of the current {name} references of `{profile}` ("
                           + ", ".join(map(str, candidates)) + ") was computed on this arithmetic")
