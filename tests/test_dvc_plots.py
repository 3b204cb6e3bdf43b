"""`maskbench dvc-plots`: DVC's plots page with the Vega libraries inline, so it draws offline,
and the pretraining loss plot's title and axis labels."""

from __future__ import annotations

import subprocess
import sys

import pytest

from maskbench.dvc_plots import offline_template
from tests.helpers import use_profile


def test_the_template_carries_the_libraries_and_only_dvcs_placeholders():
    page = offline_template()
    assert page.count("{plot_divs}") == 1 and "{scripts}" not in page  # no {scripts}: DVC adds no CDN tags
    assert "<script src" not in page
    assert "vegaEmbed" in page and "vega-lite" in page and page.count("<script>") == 3


@pytest.mark.slow
def test_the_page_dvc_writes_loads_nothing_and_labels_the_loss_plot(workdir):
    use_profile(workdir, "smoke")
    run = workdir / "runs/pretrain/mlm"
    run.mkdir(parents=True)
    (run / "log.csv").write_text("step,loss,lr,grad_norm,tokens_per_s\n1,7.0,1e-3,1.0,100\n2,6.5,1e-3,1.0,100\n")
    (run / "valid.csv").write_text("step,valid_loss\n2,6.75\n")
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=workdir, check=True)
    subprocess.run([sys.executable, "-m", "maskbench.cli", "dvc-plots", "runs/pretrain/mlm/loss"], cwd=workdir,
                   check=True, capture_output=True)
    page = (workdir / "dvc_plots/index.html").read_text()
    assert "<script src" not in page and "cdn.jsdelivr" not in page
    assert '"title": {"text": "pretrain mlm: loss"' in page
    assert '"title": "step"' in page and '"title": "loss (nats)"' in page  # the axes, not DVC's "y"
