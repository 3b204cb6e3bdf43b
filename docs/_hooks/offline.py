"""The docs site searches and highlights code opened from disk (site/index.html), offline.

mkdocs' search runs in a Web Worker that fetches search/search_index.json; a page opened from
`file://` can do neither, so searching failed. This hook swaps the search plugin's script for
js/offline-search.js, which runs lunr (the search plugin's own copy) in the page on the index
written beside it as a script (search/search_index.js, `var maskbenchSearchIndex = ...`).
Code is highlighted when the site is built (Pygments, through the codehilite extension, styled
by css/pygments.css), not by highlight.js from a CDN.
"""

from __future__ import annotations

import json
from pathlib import Path

SCRIPTS = ["search/lunr.js", "search/search_index.js", "js/offline-search.js"]


def on_config(config):
    kept = [script for script in config.extra_javascript if str(script) != "search/main.js"]
    config.extra_javascript[:] = [*kept, *SCRIPTS]
    return config


def on_post_build(config):
    search = Path(config.site_dir) / "search"
    index = json.loads((search / "search_index.json").read_text())
    (search / "search_index.js").write_text(f"var maskbenchSearchIndex = {json.dumps(index)};\n")
