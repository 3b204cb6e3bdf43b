"""Every verdict says how far its runs learned: the pretraining gaps below the unigram loss of
the runs it compares, marked "barely learned" under `verdicts.barely_learned`, in the table's
claim line and on the scorecard."""

from __future__ import annotations

import json

from maskbench import paths
from maskbench.report.cells import learning_context
from maskbench.report.index import claim_verdicts
from maskbench.report.published import Verdict, claim_of
from tests.helpers import config_with_profile


def write_gap(root, run, gap, floor=0.0):
    """A pretraining record with the fields the report reads (`cells.PRETRAIN_FIELDS`)."""
    path = root / paths.PRETRAIN_METRICS.format(run=run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"unigram_gap": gap, "valid_loss_floor": floor}))


def test_runs_that_learned_show_their_gaps(tmp_path, raw_params):
    config = config_with_profile(raw_params, "tiny")
    write_gap(tmp_path, "mlm", 1.23)
    write_gap(tmp_path, "exlm", 0.4, floor=1.2)  # a DAG read with its transitions' floor
    assert learning_context(config, tmp_path, ["exlm", "mlm"]) == "`exlm` 1.60, `mlm` 1.23 nats below the unigram loss"


def test_a_verdict_between_runs_that_barely_learned_is_marked(tmp_path, raw_params):
    """grid's table7 arms ended 0.12-0.20 nats below the unigram loss: its verdicts say so first."""
    config = config_with_profile(raw_params, "tiny")
    write_gap(tmp_path, "varlen_mlm", 0.12)
    write_gap(tmp_path, "mlm", 0.9)
    text = learning_context(config, tmp_path, ["varlen_mlm", "mlm", "mlm_p30"])
    assert text == ("barely learned (`varlen_mlm` < 0.5 nats below the unigram loss): `varlen_mlm` 0.12, `mlm` 0.90 "
                    "nats below the unigram loss; not computed for `mlm_p30`")
    line = Verdict("varlen_mlm_generates_better", "does not hold: …", context=text).line()
    assert line.endswith(f"Here: does not hold: …. Pretraining of the runs compared: {text}.")
    card = {"verdicts": [{"claim": "varlen_mlm_generates_better", "part": None, "outcome": "does not hold",
                          "text": "does not hold: …", "context": text}]}
    cards = {t: (card if t == "table7" else None) for t in config["tables"]}
    scorecard = claim_verdicts(config, claim_of("varlen_mlm_generates_better"), cards, links=None)
    assert scorecard == f"table7: **does not hold** (pretraining: {text})"


def test_pretraining_seeds_are_averaged(tmp_path, raw_params):
    raw_params["pretrain"]["seeds"] = [0, 1]
    config = config_with_profile(raw_params, "tiny")
    write_gap(tmp_path, "mlm", 1.0)
    write_gap(tmp_path, "mlm-pseed1", 0.2)
    assert learning_context(config, tmp_path, ["mlm"]) == "`mlm` 0.60 nats below the unigram loss"
