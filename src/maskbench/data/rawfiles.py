"""Open a raw data file as text, decompressed as its name says (`.gz`, `.bz2`), for every reader.

One opener for all readers, so that a file in the wrong format fails the same way everywhere:
with an error naming the file and what it was expected to be, instead of a bare `BadGzipFile`
or `OSError: Invalid data stream` from deep inside a reader. Text is read as UTF-8 with an
optional byte-order mark dropped (`utf-8-sig`): official files such as GLUE's MRPC TSVs start
with one, and left in place it would become part of the first column's name.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

ENCODING = "utf-8-sig"
COMPRESSIONS = {".gz": ("gzip", gzip.open), ".bz2": ("bzip2", bz2.open)}  # suffix -> (name, opener)


class RawFileError(ValueError):
    """A raw data file is not in the format its name promises; the message names file and format."""


def _expected_format(path: Path) -> str:
    """What `path` must hold, in words, judging by its suffix."""
    compression = COMPRESSIONS.get(path.suffix)
    return f"{compression[0]}-compressed UTF-8 text" if compression else "UTF-8 text"


def compression_suffix(path: Path) -> str:
    """`.gz` or `.bz2` when the name says the file is compressed, else ``""``."""
    return path.suffix if path.suffix in COMPRESSIONS else ""


@contextlib.contextmanager
def open_text(path: str | Path, newline: str | None = None) -> Iterator[TextIO]:
    """The text of `path`, decompressed by its suffix, as a stream (MOSES is 1.6M lines).

    Decompression and decoding happen while the caller reads, so errors are caught around the
    caller's block too: codec errors (OSError, EOFError, zlib.error, UnicodeDecodeError) become
    a RawFileError, a reader's own errors (missing column, bad JSON) pass unchanged."""
    path = Path(path)
    opener = COMPRESSIONS.get(path.suffix, (None, open))[1]
    try:
        with opener(path, "rt", encoding=ENCODING, newline=newline) as stream:
            yield stream
    except FileNotFoundError:
        raise
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise RawFileError(
            f"{path}: cannot be read as {_expected_format(path)}, as its name says it is "
            f"({type(exc).__name__}: {exc}); is it a different or truncated file?"
        ) from exc
