"""table5 (ablations) and table7 (Look Around): the ablation runs differ from their base runs in
what they name only, generation perplexity equals its hand computation, MAE-LM's misaligned
positions, and both tables built from synthetic files with their claims decided."""

from __future__ import annotations

import copy
import json
import math
import re
from types import SimpleNamespace

import pytest
import torch
import yaml

from maskbench import paths
from maskbench.analysis.perplexity import (
    causal_nll,
    generation_perplexity,
    masked_nll,
    measure,
    why_not_generative,
)
from maskbench.config import ParamsError, differences, read_params, table_rows
from maskbench.eval.verdict import A_BETTER
from maskbench.io import write_json
from maskbench.model.encoder import Encoder, EncoderConfig
from maskbench.objectives.cards import card
from maskbench.objectives.registry import SpecialTokens, build_objective
from maskbench.report import ablations, look_around
from maskbench.report.published import claims_decided_by, load_published
from maskbench.stages import job
from maskbench.train.pretrain import PretrainFiles, pretrain
from tests.helpers import (config_with_profile, declare_measure_spread, declare_pretraining_spread, objective_step,
                           pretrain_workdir, write_predictions)

V = 7  # vocabulary of the stub model
SPECIALS = SpecialTokens(pad=0, cls=1, sep=2, mask=3)


class FixedDistribution(torch.nn.Module):
    """An "encoder" whose next-token distribution is `probs` whatever it reads."""

    def __init__(self, probs: torch.Tensor):
        super().__init__()
        self.probs = probs

    def forward(self, input_ids, attention_mask=None, attn_mask=None, **_):
        return SimpleNamespace(last_hidden_state=torch.zeros(*input_ids.shape, 1))

    def lm_logits(self, hidden):
        return self.probs.log().expand(*hidden.shape[:-1], V)


def test_generation_perplexity_of_a_known_distribution_is_the_hand_computation():
    probs = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.5, 0.3, 0.2]) + 1e-30
    blocks = torch.tensor([[1, 4, 5, 6, 4, 2], [1, 5, 5, 4, 6, 2]])  # bodies: 4 5 6 4 and 5 5 4 6
    body = [4, 5, 6, 4, 5, 5, 4, 6]
    by_hand = math.exp(-sum(math.log(float(probs[t])) for t in body) / len(body))
    stub = FixedDistribution(probs)
    for nll in (causal_nll(stub, blocks), masked_nll(stub, blocks, mask_id=3, rows=3)):
        assert nll.shape == (2, 4)
        assert math.exp(nll.double().mean().item()) == pytest.approx(by_hand, rel=1e-6)
    objective = SimpleNamespace(encoder=stub, specials=SPECIALS, card=card("mlm"))
    found = generation_perplexity(objective, blocks, rows=5)  # an MLM's card: the masked reading
    assert found["generation_perplexity"] == pytest.approx(by_hand, rel=1e-6) and found["tokens"] == 8


def tiny_encoder(scheme: str = "rope") -> Encoder:
    torch.manual_seed(0)
    return Encoder(EncoderConfig(vocab_size=20, n_layer=1, n_embd=16, n_head=2, n_inner=32,
                                 max_position=16, dropout=0.0,
                                 position_scheme=scheme, pad_token_id=0)).eval()


def test_a_masked_model_reads_only_the_prefix_and_its_mask():
    """Changing tokens after position i leaves the prediction of token i unchanged."""
    encoder = tiny_encoder()
    blocks = torch.tensor([[1, 5, 6, 7, 8, 9, 10, 2]])
    changed = blocks.clone()
    changed[0, 4:7] = torch.tensor([11, 12, 13])
    a, b = masked_nll(encoder, blocks, 3, rows=4), masked_nll(encoder, changed, 3, rows=4)
    assert torch.allclose(a[0, :3], b[0, :3], atol=1e-5)  # targets 5, 6, 7 precede the change
    assert not torch.allclose(a[0, 3:], b[0, 3:])


def test_generation_perplexity_applies_to_ar_and_the_mlms_only():
    encoder = tiny_encoder()
    run = {"modality": "text"}
    applies = {o: why_not_generative(build_objective({**run, "objective": o, "knobs": k}, encoder, SPECIALS)) is None
               for o, k in [("ar", {}), ("mlm", {}), ("varlen_mlm", {}), ("none", {}), ("dar", {}), ("mae_lm", {})]}
    assert applies == {"ar": True, "mlm": True, "varlen_mlm": True, "none": False, "dar": False, "mae_lm": False}


def test_misaligned_mae_lm_numbers_its_visible_tokens_consecutively():
    encoder = tiny_encoder()
    seen = []
    encoder.register_forward_hook(lambda module, args, kwargs, out: seen.append(kwargs.get("positions")),
                                  with_kwargs=True)
    tokens = torch.tensor([[1, 5, 6, 7, 8, 9, 10, 2]])
    for aligned in (True, False):
        objective = build_objective({"modality": "text", "objective": "mae_lm",
                                     "knobs": {"mask_ratio": 0.3, "decoder_layers": 1, "aligned_positions": aligned}},
                                    encoder, SPECIALS)
        objective_step(objective, tokens, 0)
    aligned_positions, misaligned = seen
    assert aligned_positions is not None and aligned_positions.max() == 7  # the original positions, gaps and all
    assert misaligned is None  # the encoder's default: 0, 1, 2, ... over the visible tokens


@pytest.mark.parametrize("profile", ["tiny", "grid", "paper"])
def test_each_ablation_differs_from_its_base_only_in_what_it_names(raw_params, profile):
    config = config_with_profile(raw_params, profile)
    rows = table_rows(config, "table5")
    ablated = {name: row for name, row in rows.items() if "of" in row}
    # paper adds MAE-LM Tab. 2's handling of [MASK], decoder sizes (1, 6 layers; 512, 1024 wide) and
    # attention; grid all but the 1-layer decoder (its base's own)
    assert len(ablated) == {"paper": 21, "grid": 21}.get(profile, 14)
    assert all("of" not in rows[row["of"]] for row in ablated.values())
    for row in ablated.values():
        assert differences(config, row["run"], rows[row["of"]]["run"]) == sorted(row["changes"])


def test_an_ablation_that_changes_more_is_refused(raw_params):
    raw = copy.deepcopy(raw_params)
    raw["runs"]["smiles_exlm_sparse"]["knobs"]["k"] = 4
    with pytest.raises(ParamsError, match=r"tables\.table5\.rows\.exlm_sparse_dag: run smiles_exlm_sparse differs "
                                          r"from smiles_exlm \(row exlm\) in \['knobs\.k', 'knobs\.transitions'\]"):
        config_with_profile(raw, "tiny")
    raw = copy.deepcopy(raw_params)
    raw["tables"]["table5"]["rows"].pop("exlm_sparse_dag")
    with pytest.raises(ParamsError, match=r"tables\.table5\.runs: smiles_exlm_sparse has no row"):
        config_with_profile(raw, "tiny")


def test_a_row_fine_tuned_off_the_table_or_unlike_its_base_is_refused(raw_params):
    """A row's own tasks (its paper's protocol) are tasks of the table, and an ablation is
    fine-tuned on its base row's tasks, or some of them: else its comparison with the base reads
    a task the base lacks."""
    raw = copy.deepcopy(raw_params)
    raw["tables"]["table5"]["rows"]["exlm"]["tasks"] = ["bbbp", "bace"]
    with pytest.raises(ParamsError, match=r"tables\.table5\.rows\.exlm\.tasks: \['bace'\] are not tasks of the table"):
        config_with_profile(raw, "tiny")
    raw = copy.deepcopy(raw_params)
    raw["tables"]["table5"]["tasks"] = ["bbbp", "bace"]
    raw["tables"]["table5"]["rows"]["exlm"]["tasks"] = ["bbbp"]
    with pytest.raises(ParamsError, match=r"tables\.table5\.rows\.exlm_no_rope2d\.tasks: \['bbbp', 'bace'\] are "
                                          r"not among those of row exlm \['bbbp'\]"):
        config_with_profile(raw, "tiny")
    raw["tables"]["table5"]["rows"]["exlm"]["tasks"] = ["bbbp", "bace"]
    raw["tables"]["table5"]["rows"]["exlm_no_rope2d"]["tasks"] = ["bbbp"]   # some of its base's: one to compare
    config_with_profile(raw, "tiny")


def test_mlm_pp_runs_as_long_as_exlm_costs(raw_params):
    """1.49 = 342.9 / 230.0 ms a step (benchmarks/results/objectives_cpu.json) times each profile's steps."""
    for profile in ("tiny", "grid"):
        config = config_with_profile(copy.deepcopy(raw_params), profile)
        pp = {**config["pretrain"], **config["runs"]["smiles_mlm_pp"]["overrides"]}["steps"]
        assert pp == round(config["pretrain"]["steps"] * 342.9 / 230.0)


TAB2_VARIANT_CLAIMS = ("maelm_resets_mask", "maelm_beats_random_replace", "maelm_self_attention", "maelm_small_decoder")


def test_claims_name_rows_and_objectives_the_tables_have(raw_params):
    for profile in ("tiny", "grid", "paper"):
        config = config_with_profile(copy.deepcopy(raw_params), profile)
        rows = table_rows(config, "table5")
        for claim in claims_decided_by("ablations"):
            # tiny's table5 leaves MAE-LM Tab. 2's [MASK]-handling, size and attention rows to grid's
            if profile != "tiny" or not claim["id"].startswith(TAB2_VARIANT_CLAIMS):
                assert {r for pair in claim["pairs"] for r in pair} <= set(rows), (profile, claim["id"])
        objectives = {config["runs"][r]["objective"] for r in config["tables"]["table7"]["runs"]}
        assert all({c["better"], c["than"]} <= objectives for c in claims_decided_by("look_around"))
    known = {row for profile in ("tiny", "paper")
             for row in table_rows(config_with_profile(copy.deepcopy(raw_params), profile), "table5")}
    assert all(set(s["rows"]) <= known for s in load_published()["ablations"].values())


def built(module, config, table, root):
    """(markdown, verdicts) of a table rendered by `module`."""
    rendered = module.render(config, table, root)
    return rendered.markdown, rendered.verdicts


def small_table5(raw_params):
    raw_params["verdicts"]["bootstrap"] = 100
    return config_with_profile(raw_params, "tiny")


def test_table5_without_files_says_not_computed(tmp_path, raw_params):
    config = small_table5(raw_params)
    text, verdicts = built(ablations, config, "table5", tmp_path)
    assert "| `exlm_no_rope2d` | `smiles_exlm_no_rope2d` | exlm | of `exlm`: knobs.rope2d True → False |" in text
    assert "| `vanilla_mlm_pp` | `smiles_mlm_pp` | mlm | of `vanilla_mlm`: steps 1500 → 2236 |" in text
    assert "ExLM Tab. 2: MNLI 85.1, QNLI 91.4, QQP 91.3, RTE 57.6, avg 81.4" in text
    # the controls † is read against sit below the rows, as in every table
    controls = text.split("Controls (")[1].split("Claims")[0]
    assert "| control: no pretraining (`smiles_none`) | not computed |" in controls
    assert "| baselines | not computed |" in controls
    assert [v.claim for v in verdicts] == [c["id"] for c in claims_decided_by("ablations")]
    for verdict in verdicts:   # tiny's table5 has no row of MAE-LM Tab. 2's variants (grid's has)
        variant = verdict.claim.startswith(TAB2_VARIANT_CLAIMS)
        assert verdict.text.startswith("not checked: the table has no row mae_lm_" if variant else "not computed")


def test_table5_shows_both_readings_of_without_transitions_and_the_gated_heads(tmp_path, raw_params):
    """Beside this project's uniform-DAG "w/o transitions", the official code's per-[MASK] CTC,
    each labelled as whose reading it is, both against the paper's one "w/o Transitions" row;
    and the official multi-head gated transitions, one head per encoder head."""
    text, verdicts = built(ablations, small_table5(raw_params), "table5", tmp_path)
    assert ("| `exlm_no_transitions`: w/o transitions (this project's reading: uniform DAG) | "
            "`smiles_exlm_no_transitions` | exlm | of `exlm`: knobs.transitions dense → none |") in text
    ctc = ("| `exlm_no_transitions_ctc`: w/o transitions (official reading: per-mask CTC) | "
           "`smiles_exlm_no_transitions_ctc` | exlm | of `exlm`: knobs.transitions dense → ctc |")
    assert ctc in text
    assert "ExLM Tab. 2: MNLI 83.8, QNLI 90.9, QQP 91.1, RTE 55.6, avg 80.4" in text.split(ctc)[1].split("\n")[0]
    assert ("| `exlm_gated_transitions`: multi-head gated transitions (official heads; transition_input "
            "detached+position as this profile's ExLM, official states+position) | `smiles_exlm_gated` | exlm | "
            "of `exlm`: knobs.transition_heads (default) → encoder |") in text
    assert "exlm_beats_no_transitions_ctc" in [v.claim for v in verdicts]


def official_rows_unlabelled(config: dict) -> list[str]:
    """table5's rows labelled as the official code's learned transitions whose label does not
    name the `transition_input` their run reads (the official code's is states+position, its
    `links_feature: feature:position`), so a row that departs from it says so on the table."""
    from maskbench.objectives.cards import LEARNED_TRANSITIONS

    found = []
    for row_id, row in table_rows(config, "table5").items():
        spec = config["runs"][row["run"]]
        knobs = {**card("exlm").defaults, **spec.get("knobs", {})}
        if "official" in row.get("label", "") and spec["objective"] == "exlm" and \
                knobs["transitions"] in LEARNED_TRANSITIONS:
            if not re.search(rf"transition_input {re.escape(knobs['transition_input'])}(?![+\w])", row["label"]):
                found.append(row_id)
    return found


def test_the_official_gated_row_says_which_transition_input_it_reads_under_every_profile(raw_params):
    """The official code's gated heads read the states beside their slot positions; the paper
    profile's row does, tiny's reads them beside detached states and grid's the states alone (as
    each profile's ExLM): each label says which. A label without it, or a run whose input
    changes under its label, is caught."""
    for profile in ("tiny", "grid", "paper", "smoke"):
        assert official_rows_unlabelled(config_with_profile(copy.deepcopy(raw_params), profile)) == [], profile
    raw = copy.deepcopy(raw_params)
    raw["profiles"]["grid"]["tables"]["table5"]["rows"]["exlm_gated_transitions"]["label"] = \
        "multi-head gated transitions (official)"
    assert official_rows_unlabelled(config_with_profile(raw, "grid")) == ["exlm_gated_transitions"]
    raw = copy.deepcopy(raw_params)
    raw["profiles"]["grid"]["runs"]["smiles_exlm_gated"] = {"knobs": {"transition_input": "states+position"}}
    raw["profiles"]["grid"]["tables"]["table5"]["rows"]["exlm_gated_transitions"]["changes"] = [
        "knobs.transition_heads", "knobs.transition_input"]
    assert official_rows_unlabelled(config_with_profile(raw, "grid")) == ["exlm_gated_transitions"]


def test_table5_names_the_decoder_depths_each_profile_compares(raw_params):
    """MAE-LM Tab. 2's "2 layer" row takes its 4-layer base to 2 layers: under `paper` the row
    makes that change, on tiny (a 1-layer base) the numbers beside it are said to measure another."""
    said = {}
    for profile, base in (("tiny", 1), ("paper", 4)):
        config = config_with_profile(copy.deepcopy(raw_params), profile)
        rows = table_rows(config, "table5")
        assert ablations.change_text(config, rows["mae_lm_decoder_2"], rows) == \
            f"of `mae_lm`: knobs.decoder_layers {base} → 2"
        said[profile] = ablations.published_text(config, "mae_lm_decoder_2", rows["mae_lm_decoder_2"], rows)
    assert said == {"tiny": "MAE-LM Tab. 2 (decoder_layers 4 → 2; here decoder_layers 1 → 2: another change): avg 85.8",
                    "paper": "MAE-LM Tab. 2 (decoder_layers 4 → 2): avg 85.8"}


def test_paper_table5_fine_tunes_each_papers_rows_by_its_own_protocol(tmp_path, raw_params):
    """Under `paper`, ExLM Tab. 2's rows sit in Tab. 6's four columns and MAE-LM Tab. 2's in the
    eight GLUE ones ("—" outside their protocol, "not computed" inside it before any file), the
    table says so, and each claim waits for its rows' files rather than finding no common task."""
    config = config_with_profile(raw_params, "paper")
    text, verdicts = built(ablations, config, "table5", tmp_path)
    assert ("Each row is fine-tuned on the tasks of its paper's protocol only (— elsewhere): "
            "`vanilla_mlm`: rmlm_mnli, rmlm_qnli, rmlm_qqp, rmlm_rte;") in text

    def task_cells(row_id):
        line = next(line for line in text.splitlines() if line.startswith(f"| `{row_id}`"))
        return [c.strip() for c in line.split("|")[1:-1]][6:19]   # after row, run, objective, ablates, knobs, positions

    assert task_cells("exlm") == ["—"] * 9 + ["not computed"] * 4
    assert task_cells("mae_lm_cross_attention") == ["not computed (vs base: not computed)"] * 8 + ["—"] * 5
    # MAE-LM Fig. 4's δ series on SQuAD 2.0 too (the 9th column)
    assert task_cells("mae_lm_delta_50") == ["not computed (vs base: not computed)"] * 9 + ["—"] * 4
    assert all(v.text.startswith("not computed: `") and "lacks" in v.text for v in verdicts), verdicts


def test_table5_claims_on_clear_and_noisy_rows(tmp_path, raw_params, monkeypatch):
    """ExLM far better than without 2-D RoPE; as good as the sparse DAG (same noise: not decided);
    the δ series worse from end to end and at its first two steps, alike at the last two: five
    parts of one claim, so Holm holds its first steps to 1.25 % and 1.7 % (a small declared
    pretraining spread)."""
    config = small_table5(raw_params)
    declare_pretraining_spread(monkeypatch, config, 0.1)
    rows = table_rows(config, "table5")
    noise = {"smiles_none": 6.0, **{row["run"]: 1.0 for row in rows.values()},
             "smiles_exlm": 0.3, "smiles_exlm_no_rope2d": 1.0, "smiles_exlm_sparse": 0.3,
             "smiles_mae_lm_t5": 0.2, "smiles_mae_lm_d25": 0.7, "smiles_mae_lm_d50": 2.0, "smiles_mae_lm_d75": 2.0,
             "smiles_mae_lm_d100": 2.0}
    for run, scale in noise.items():
        write_predictions(tmp_path, run, "bbbp", "roc_auc", scale)
    text, verdicts = built(ablations, config, "table5", tmp_path)
    found = {v.claim: v.text for v in verdicts}
    assert found["exlm_beats_no_rope2d"].startswith(
        "holds: claim on the mean of each row pair (one part): `exlm` − `exlm_no_rope2d`, bbbp: +")
    assert found["exlm_beats_sparse_dag"].startswith("not decided")
    # the δ series, a trend: its ends (δ = 0 against 1) decided apart, beside its four steps, of
    # which the first two's intervals exclude zero, but not at Holm's level for 5 parts
    delta = found["maelm_delta_degrades"]
    assert delta.startswith("holds: claim on the mean of each row pair (Holm across its 5 parts): "
                            "`mae_lm` − `mae_lm_delta_100`, bbbp: +")
    assert delta.count("(not decided at Holm's level)") == 2 and delta.count("(not decided)") == 2
    assert "▲" not in text.split("`smiles_exlm_no_rope2d`")[1].split("\n")[0]  # the ablation is worse: ▼
    assert "▼" in text.split("`smiles_exlm_no_rope2d`")[1].split("\n")[0]


def perplexity_record(root, run, block_nll):
    mean = sum(block_nll) / len(block_nll)
    write_json(root / paths.GENERATION_PERPLEXITY.format(run=run),
               {"run": run, "applies": True, "generation_perplexity": math.exp(mean), "nll_nats": mean, "nll_std": 1.0,
                "tokens": 126 * len(block_nll), "block_nll": block_nll})


def test_table7_decides_generation_perplexity_by_the_noise(tmp_path, raw_params, monkeypatch):
    config = config_with_profile(raw_params, "tiny")
    text, verdicts = built(look_around, config, "table7", tmp_path)
    assert "not computed (no runs/perplexity/mlm/metrics.json)" in text
    assert {v.claim: v.text.split(":")[0] for v in verdicts} == {"dar_beats_ar": "not computed",
                                                                       "varlen_mlm_generates_better": "not computed"}
    assert "Variable-length, mask ratio uniform in [0.15, 0.3]: Pile 45.1, C4 59.4" in text
    assert "| baselines | — | — | — | not computed" in text  # the tasks' baselines, once computed, sit below the runs
    task = config["tables"]["table7"]["tasks"][0]
    write_json(tmp_path / paths.BASELINE_METRICS.format(task=task),
               {"metric": "accuracy", "baselines": {"majority": {"label": "majority class", "value": 0.591}}})
    assert "| baseline: majority class | — | — | — | 59.1 |" in built(look_around, config, "table7", tmp_path)[0]
    blocks = [5.0 + 0.5 * math.sin(i) for i in range(64)]  # blocks differ in difficulty far more than the runs do
    perplexity_record(tmp_path, "mlm", blocks)
    perplexity_record(tmp_path, "varlen_mlm", [x - 0.1 + 0.02 * math.cos(7 * i) for i, x in enumerate(blocks)])
    write_json(tmp_path / paths.GENERATION_PERPLEXITY.format(run="dar"), {"applies": False, "why": "dar: groups"})
    found = {v.claim: v.text for v in built(look_around, config, "table7", tmp_path)[1]}["varlen_mlm_generates_better"]
    assert found.startswith("not computed: decided against each of 2 runs")  # the fixed 0.3 arm has no perplexity yet
    perplexity_record(tmp_path, "mlm_p30", [x - 0.05 + 0.01 * math.cos(5 * i) for i, x in enumerate(blocks)])
    declare_measure_spread(monkeypatch, config, "generation_nll", None)
    found = {v.claim: v.text for v in built(look_around, config, "table7", tmp_path)[1]}["varlen_mlm_generates_better"]
    # one pretraining run per recipe and no spread declared for the generation NLL: the blocks' noise
    # alone would read two runs as two recipes
    assert found.startswith("not decided: decided against each of 2 runs")
    assert "one pretraining seed; no declared" in found
    declare_measure_spread(monkeypatch, config, "generation_nll", 0.0)  # the blocks' share of the noise alone
    text, verdicts = built(look_around, config, "table7", tmp_path)
    found = {v.claim: v.text for v in verdicts}["varlen_mlm_generates_better"]
    assert found.startswith("holds: decided against each of 2 runs")  # 0.1 and 0.05 nats lower on every block, paired
    assert "against `mlm` (mask ratio 0.15): holds: generation perplexity `varlen_mlm`" in found
    assert "over 64 paired blocks +0.0994 nats" in found
    assert "against `mlm_p30` (mask ratio 0.3): holds" in found
    assert "does not apply (dar: groups)" in text
    perplexity_record(tmp_path, "varlen_mlm", [x + 0.3 * math.sin(3 * i) for i, x in enumerate(blocks)])
    verdicts = look_around.render(config, "table7", tmp_path).verdicts
    assert {v.claim: v.text for v in verdicts}["varlen_mlm_generates_better"].startswith("not decided")
    perplexity_record(tmp_path, "varlen_mlm", blocks[:10])
    verdicts = look_around.render(config, "table7", tmp_path).verdicts
    assert {v.claim: v.text for v in verdicts}["varlen_mlm_generates_better"].startswith("not computed")


def test_table7_decides_variable_length_against_both_fixed_ratios(tmp_path, raw_params, monkeypatch):
    """Look Around Tab. 7: variable-length MLM must beat MLM at 0.15 and at 0.3. Block NLLs built
    so every paired difference is a constant ± e alternating over 64 blocks: mean the constant,
    std e * sqrt(64 / 63), noise bound 1.96 * std / 8: 0.0025 for e = 0.01 (against 0.15),
    0.0049 for e = 0.02 (against 0.3), with a declared pretraining spread of zero (its share of
    the noise: tests/test_measure_claims.py)."""
    config = config_with_profile(raw_params, "tiny")
    declare_measure_spread(monkeypatch, config, "generation_nll", 0.0)
    blocks = [5.0 + 0.5 * math.sin(i) for i in range(64)]
    varlen = [x - 0.1 + 0.01 * (-1) ** i for i, x in enumerate(blocks)]  # 0.1 nats below MLM at 0.15
    perplexity_record(tmp_path, "mlm", blocks)
    perplexity_record(tmp_path, "varlen_mlm", varlen)

    def verdict(p30_offset: float) -> str:
        """The claim with MLM at 0.3 `p30_offset` nats above variable-length MLM on every block."""
        perplexity_record(tmp_path, "mlm_p30", [x + p30_offset + 0.02 * (-1) ** i for i, x in enumerate(varlen)])
        return {v.claim: v.text for v in look_around.render(config, "table7", tmp_path).verdicts}[
            "varlen_mlm_generates_better"]

    against_015 = "against `mlm` (mask ratio 0.15): holds: generation perplexity"
    both = verdict(0.05)  # beats 0.3 by 0.05 ± 0.02: holds against both
    assert both.startswith("holds: decided against each of 2 runs") and against_015 in both
    assert "+0.1000 nats; 95 % interval [+0.0975, +0.1025]" in both and "+0.0500 nats; 95 % interval [+0.0451, " in both
    # as good as 0.3 (paired differences +-0.02, mean 0): beating 0.15 alone decides nothing
    tie = verdict(0.0)
    assert tie.startswith("not decided: decided against each of 2 runs") and against_015 in tie
    assert "against `mlm_p30` (mask ratio 0.3): not decided" in tie
    # 0.3 lower by 0.05 nats on every block: the claim does not hold, whatever 0.15 says
    worse = verdict(-0.05)
    assert worse.startswith("does not hold: decided against each of 2 runs") and against_015 in worse
    assert "against `mlm_p30` (mask ratio 0.3): does not hold" in worse


def test_against_every_needs_every_comparison():
    holds, undecided, missing = "holds: a", "not decided: b", "not computed: no file"
    assert look_around.against_every({"x": holds, "y": holds}).startswith("holds: decided against each of 2 runs")
    assert look_around.against_every({"x": holds, "y": undecided}).startswith("not decided")
    assert look_around.against_every({"x": holds, "y": "mixed: c"}).startswith("not decided")
    assert look_around.against_every({"x": holds, "y": missing}).startswith("not computed")
    assert look_around.against_every({"x": "does not hold: d", "y": missing}).startswith("does not hold")


def test_a_variable_length_table_needs_mlm_at_both_ends_of_its_range(raw_params):
    raw = copy.deepcopy(raw_params)
    raw["tables"]["table7"]["runs"].remove("mlm_p30")
    with pytest.raises(ParamsError, match=r"tables\.table7\.runs: variable-length MLM `varlen_mlm` draws its mask "
                                          r"ratio from \[0\.15, 0\.3\]; .* needs an mlm run with knobs\.mask_ratio "
                                          r"\[0\.3\] \(its mlm runs have \[0\.15\]\)"):
        config_with_profile(raw, "tiny")


@pytest.mark.slow
def test_the_stage_measures_ar_and_mlm_and_says_why_not_dar(tmp_path, tiny_tokenizer):
    """`maskbench perplexity` on runs pretrained a few steps: a finite generation perplexity for
    MLM and AR on the same held-out tokens, "does not apply" for DAR."""
    root = pretrain_workdir(tmp_path / "w", tiny_tokenizer, steps=4, checkpoint_every=100, log_every=2, eval_every=2,
                            batch_size=4, micro_batch_size=4, eval_blocks=4, device="cpu")
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["generation_perplexity"] = {"blocks": 3, "rows": 16}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    _, config = read_params(root / "params.yaml")
    records = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        for run in ("mlm", "ar", "dar"):
            pretrained = job(config, "pretrain", {"run": run})
            files = PretrainFiles.of_stage(pretrained.output, root / f"runs/pretrain/{run}/checkpoint", root)
            pretrain(config, run, root / pretrained.input["tokens"], root / pretrained.input["tokenizer"],
                     [root / p for p in pretrained.input["cards"]], files)
            measured = job(config, "perplexity", {"run": run})
            records[run] = measure(config, run, measured.input, measured.output)
            written = json.loads((root / measured.output["metrics"]).read_text())
            assert written["run"] == run and "cpu_capability" in written["arithmetic"]  # the footer reads it
    assert records["mlm"]["tokens"] == records["ar"]["tokens"] == 3 * (32 - 2) and len(records["ar"]["block_nll"]) == 3
    assert all(1 < records[r]["generation_perplexity"] < math.inf for r in ("mlm", "ar"))
    assert records["dar"] == {"applies": False, "why": records["dar"]["why"]} and "dar" in records["dar"]["why"]


@pytest.mark.parametrize(("decided", "outcome"), [
    ({("mae_lm", "mae_lm_delta_25"): 0.001}, "not decided (no trend: the ends are not decided apart)"),
    ({("mae_lm", "mae_lm_delta_100"): 0.001}, "holds"),
    ({("mae_lm", "mae_lm_delta_100"): 0.001, ("mae_lm_delta_50", "mae_lm_delta_75"): -0.001}, "mixed")])
def test_a_trend_claim_needs_its_ends_apart_not_one_step(raw_params, monkeypatch, decided, outcome):
    """MAE-LM Fig. 4's δ series is a trend: one neighbouring pair decided for it is not the
    trend; its ends (δ = 0 against 1) decided apart, with no step against it, are."""
    from maskbench.eval.verdict import Comparison
    from maskbench.report.published import Part, claim_of

    def parts(config, table, better, than, evidence, claim):
        runs = {row["run"]: row_id for row_id, row in table_rows(config, table).items()}
        signed = decided.get((runs[better], runs[than]), 0.0)
        p = 1e-6 if signed else 0.9
        found = Comparison(signed or 0.001, 0.0, 0.0, "A" if signed > 0 else "B", 100, 0, p=p)
        return [Part(better, than, "bbbp", ["bbbp"], found)], []

    monkeypatch.setattr(ablations, "pair_parts", parts)
    config = config_with_profile(raw_params, "tiny")
    text = ablations.claim_verdict(config, "table5", claim_of("maelm_delta_degrades"), {})
    assert text.startswith(f"{outcome}: ")


def test_a_trend_claim_with_no_task_left_is_not_decided(raw_params, monkeypatch):
    """Every row of the δ series did not learn on the claim's tasks (the grid's table5 on
    2026-12-02): no part is left to read a chain on, and the verdict reads "not decided", as any
    claim's does, naming what was left out (it once read an empty outcome, which the card refused)."""
    from maskbench.report.published import Verdict, claim_of

    monkeypatch.setattr(ablations, "pair_parts", lambda config, table, better, than, evidence, claim: ([], ["bbbp"]))
    config = config_with_profile(raw_params, "tiny")
    text = ablations.claim_verdict(config, "table5", claim_of("maelm_delta_degrades"), {})
    assert text.startswith("not decided: ") and "no task left; did not learn (left out): bbbp (" in text
    assert Verdict("maelm_delta_degrades", text).outcome == "not decided"


GLUE_MEAN = ["mnli", "qnli", "sst2"]


def delta_verdict(monkeypatch, raw_params, decided: dict) -> str:
    """The δ claim's verdict where each row pair has Fig. 4's two parts, the GLUE mean and
    SQuAD 2.0, and `decided` maps ((better, than), part) to a decided difference (else none)."""
    from maskbench.eval.verdict import Comparison
    from maskbench.report.published import Part, claim_of

    def parts(config, table, better, than, evidence, claim):
        runs = {row["run"]: row_id for row_id, row in table_rows(config, table).items()}
        found = []
        for label, tasks in (("glue", GLUE_MEAN), ("squad_v2", ["squad_v2"])):
            signed = decided.get(((runs[better], runs[than]), label), 0.0)
            comparison = Comparison(signed or 0.001, 0.0, 0.0, "A" if signed > 0 else "B", 100, 0,
                                    p=1e-6 if signed else 0.9)
            found.append(Part(better, than, label, tasks, comparison))
        return found, []

    monkeypatch.setattr(ablations, "pair_parts", parts)
    config = config_with_profile(raw_params, "paper")
    return ablations.claim_verdict(config, "table5", claim_of("maelm_delta_degrades"), {})


ENDS, STEP = ("mae_lm", "mae_lm_delta_100"), ("mae_lm", "mae_lm_delta_25")
# MAE-LM Fig. 4 by part: (what is decided, how the claim reads, each part's outcome)
DELTA_BY_PART = [
    ({(ENDS, "glue"): 0.01, (ENDS, "squad_v2"): 0.01}, "holds on the mean of 3 tasks, squad_v2", ["holds", "holds"]),
    ({(ENDS, "glue"): 0.01, (STEP, "squad_v2"): 0.01},
     "holds on the mean of 3 tasks; not decided on squad_v2", ["holds", "not decided"]),
    ({(ENDS, "glue"): 0.01, (ENDS, "squad_v2"): -0.01},
     "mixed — holds on the mean of 3 tasks; does not hold on squad_v2", ["holds", "does not hold"]),
    ({(ENDS, "glue"): 0.01, (ENDS, "squad_v2"): 0.01, (("mae_lm_delta_50", "mae_lm_delta_75"), "squad_v2"): -0.01},
     "mixed — holds on the mean of 3 tasks; mixed on squad_v2", ["holds", "mixed"]),
    ({(STEP, "glue"): 0.01, (STEP, "squad_v2"): 0.01},
     "not decided on the mean of 3 tasks, squad_v2", ["not decided", "not decided"])]


def reads_fig4_by_part(monkeypatch, raw_params) -> bool:
    """Whether the δ claim reads as each row of DELTA_BY_PART says (its parts as the scorecard
    counts them too)."""
    from maskbench.report.published import Verdict

    for decided, reading, parts in DELTA_BY_PART:
        verdict = Verdict("maelm_delta_degrades", delta_verdict(monkeypatch, raw_params, decided))
        if (verdict.reading, verdict.parts) != (reading, parts):
            return False
    return True


def test_the_delta_trend_reads_fig4s_glue_and_squad_halves_each_as_a_trend(raw_params, monkeypatch):
    """MAE-LM Fig. 4 plots the GLUE average and SQuAD 2.0: the δ claim holds on a part only
    where that part's ends are decided apart with no step against; SQuAD's one neighbouring pair
    decided is no trend, and GLUE's trend does not make SQuAD's. Mutants of the rule are caught:
    reading the first part's ends only (the claim before its SQuAD half), or a trend on any one
    neighbouring pair (the issue's complaint)."""
    assert reads_fig4_by_part(monkeypatch, raw_params)
    text = delta_verdict(monkeypatch, raw_params, DELTA_BY_PART[1][0])
    assert "(no trend on squad_v2: its ends are not decided apart)" in text

    def first_part_only(config, claim, parts, sides, ends):
        return ablations.chain_reading(list(zip(parts, sides)), ends)

    def any_one_pair(config, claim, parts, sides, ends):
        return "holds" if A_BETTER in sides else "not decided"

    for mutant in (first_part_only, any_one_pair):
        with monkeypatch.context() as patch:
            patch.setattr(ablations, "trend_reading", mutant)
            assert not reads_fig4_by_part(patch, raw_params), mutant.__name__


def test_a_trend_whose_pairs_do_not_chain_is_refused():
    from maskbench.report.published import check_statistic

    claim = {"id": "broken", "statistic": "mean", "trend": True, "pairs": [["mae_lm", "mae_lm_delta_25"],
                                                                          ["mae_lm_delta_50", "mae_lm_delta_75"]]}
    with pytest.raises(ValueError, match="claim 'broken' is a trend, but its pairs .* do not form a chain"):
        check_statistic(claim)
    check_statistic({**claim, "trend": False})
