"""Markdown pages (a table, the index) as standalone HTML: the items of `snakemake --report`,
whose viewer shows HTML and images but offers a markdown file only as a download."""

from __future__ import annotations

from html import escape

from markdown_it import MarkdownIt

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; line-height: 1.4; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.5em; vertical-align: top; }
th { background: #eee; }
code { background: #f4f4f4; }
"""


def to_html(markdown: str, title: str) -> str:
    """The page of `markdown` (CommonMark with tables; raw HTML in it is escaped, not run)."""
    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)
    return (f"<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>{escape(title)}</title>\n"
            f"<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n")
