"""`dvc plots show` that works offline (`maskbench dvc-plots`).

DVC's plots page (`dvc_plots/index.html`) loads Vega, Vega-Lite and Vega-Embed from a CDN, so
without a network it stays blank. DVC takes a page template instead (`--html-template`), and
leaves its CDN scripts out when the template has no `{scripts}` placeholder; this writes one
with the three libraries inline, taken from the copies Snakemake ships for its own reports
(the Vega-Lite 5.2.0 DVC's page asks for, Vega 5.21 and Vega-Embed 6.20 beside it), and runs
`dvc plots show` with it.
"""

from __future__ import annotations

import importlib.resources
import subprocess
import tempfile
from pathlib import Path

LIBRARIES = ("vega/vega.js", "vega-lite/vega-lite.js", "vega-embed/vega-embed.js")  # in the order they load

PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <title>DVC Plot</title>
    <meta charset="utf-8">
    <script>{libraries}</script>
    <style>table {border-spacing: 15px;}</style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""


def offline_template() -> str:
    """DVC's plots page with the Vega libraries inline; `{plot_divs}` and `{refresh_tag}` are
    DVC's placeholders."""
    assets = importlib.resources.files("snakemake.assets") / "data"
    libraries = "</script>\n    <script>".join((assets / name).read_text(encoding="utf-8") for name in LIBRARIES)
    return PAGE.replace("{libraries}", libraries)


def show(dvc_args: list[str]) -> int:
    """`dvc plots show` with `dvc_args`, its page drawn by the inline libraries; DVC's exit status."""
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "offline.html"
        template.write_text(offline_template(), encoding="utf-8")
        return subprocess.run(["dvc", "plots", "show", "--html-template", str(template), *dvc_args]).returncode
