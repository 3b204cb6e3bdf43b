"""A result the report could not compute, with the reason, in place of the result.

A table never guesses a number it lacks: a file not written yet, a measure that does not apply
to the run's objective, an arm whose seeds scored other examples. What reads the files returns
`Missing` instead, and what renders a cell or a verdict shows its reason. A type of its own, not
a bare string, so that telling a result from its absence is one `isinstance` that cannot mistake
a string result (a verdict's text, a cell) for a missing one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Missing:
    """Not computed, or not applicable, because `why`: the words a cell or verdict shows."""

    why: str

    def __str__(self) -> str:
        return self.why
