"""Markdown pages (a table, the index) as standalone HTML: the items of `snakemake --report`,
whose viewer shows HTML and images but offers a markdown file only as a download.

The viewer shows each item in a frame loaded from a data: URI, where a relative link resolves
to nothing and opens a blank pane. So a table's page carries its figures: a link to a PNG beside
the page becomes the figure itself, inlined (`figures_from`).
"""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; line-height: 1.4; }
table { border-collapse: collapse; font-size: 0.9em; max-width: 100%; display: block; overflow-x: auto; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.5em; vertical-align: top; overflow-wrap: break-word; }
th code, td code { overflow-wrap: anywhere; }
th { background: #eee; }
code { background: #f4f4f4; }
figure { margin: 0.5em 0; }
figure img { max-width: 100%; }
"""


def to_html(markdown: str, title: str, figures_from: Path | None = None) -> str:
    """The page of `markdown` (CommonMark with tables; raw HTML in it is escaped, not run).
    With `figures_from`, the directory its links are relative to, each link to a PNG file there
    shows the figure in the page instead."""
    parser = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = parser.parse(markdown)
    if figures_from is not None:
        for token in tokens:
            if token.type == "inline" and token.children:
                token.children = _inline_figures(token.children, figures_from)
    body = parser.renderer.render(tokens, parser.options, {})
    return (f"<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>{escape(title)}</title>\n"
            f"<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n")


def _inline_figures(children: list[Token], base: Path) -> list[Token]:
    """`children` with each link to an existing PNG under `base` replaced by the figure, its
    link text as the caption."""
    out, i = [], 0
    while i < len(children):
        token = children[i]
        path = base / token.attrs.get("href", "") if token.type == "link_open" else None
        if path is None or path.suffix != ".png" or not path.is_file():
            out.append(token)
            i += 1
            continue
        end = next(j for j in range(i, len(children)) if children[j].type == "link_close")
        caption = escape("".join(child.content for child in children[i + 1:end]))
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        out.append(Token("html_inline", "", 0, content=(
            f'<figure><img src="data:image/png;base64,{data}" alt="{caption}"><figcaption>{caption}'
            "</figcaption></figure>")))
        i = end + 1
    return out
