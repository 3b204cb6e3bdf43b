"""The validation loss every objective reports (`Objective.masked_nll` on the blocks and masked
positions of `maskbench.train.validation`): the same positions for every objective, scored so
that it is each masked objective's own loss where the two coincide, all copies masked for
repeated MLM, and for ExLM the brute-force sum over alignments without the [CLS]/[SEP] terms."""

import math

import numpy as np
import pytest
import torch

from maskbench.objectives.cards import CARDS
from maskbench.objectives.registry import OBJECTIVES
from maskbench.objectives.masking import mask_at, mask_count
from maskbench.train.validation import EVAL_MASK_RATIO, valid_loss, valid_loss_floor, validation_set
from tests.helpers import SEQ_LEN, SPECIALS, VOCAB, WITH_UNK, Spy, brute_force_log_z, make, objective_step


def fixed(count: int = 4, seq_len: int = SEQ_LEN):
    """`count` validation blocks of a random stream, with their fixed masked positions."""
    stream = np.random.default_rng(0).integers(4, VOCAB, size=200)
    return validation_set(stream, seq_len, SPECIALS, count)


def test_validation_blocks_and_masks_are_fixed_and_spare_the_frame():
    valid = fixed()
    again = fixed()
    assert torch.equal(valid.blocks, again.blocks) and torch.equal(valid.masked_at, again.masked_at)
    assert (valid.blocks[:, 0] == SPECIALS.cls).all() and (valid.blocks[:, -1] == SPECIALS.sep).all()
    assert valid.masked_at.shape == (4, mask_count(SEQ_LEN - 2, EVAL_MASK_RATIO))
    assert (valid.masked_at > 0).all() and (valid.masked_at < SEQ_LEN - 1).all()
    assert (valid.masked_at[:, 1:] > valid.masked_at[:, :-1]).all()  # increasing: the order objectives expect
    assert len(fixed(count=1000).blocks) == 200 // (SEQ_LEN - 2)  # no more blocks than the stream holds


def test_mlm_valid_loss_is_its_own_loss_at_15_percent_and_the_none_control_measures_the_same():
    valid = fixed()
    mlm = make("mlm", {"mask_ratio": 0.15}).eval()
    own = mlm(valid.blocks, draws={"masked_at": valid.masked_at}).loss.item()
    assert valid_loss(mlm, [valid], batch=3, device="cpu",
                      precision="auto") == pytest.approx(own, rel=1e-6)  # batches weigh by count
    # the same encoder weights (same seed) under the other MLM-family objectives: the same number
    for name, knobs in (("varlen_mlm", {}), ("none", {"mask_ratio": 0.3})):
        assert valid_loss(make(name, knobs), [valid], batch=4, device="cpu",
                          precision="auto") == pytest.approx(own, rel=1e-6)


def test_valid_loss_runs_in_eval_mode_and_restores_the_mode():
    valid, model = fixed(), make("mlm", {"mask_ratio": 0.15})
    model.encoder = Spy(model.encoder)
    modes = []
    model.encoder.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    valid_loss(model, [valid], batch=4, device="cpu", precision="auto")
    assert modes == [False] and model.training


@pytest.mark.parametrize("delta", [0.0, 0.5])
def test_mae_lm_valid_loss_is_its_own_loss_with_those_masks(delta):
    valid = fixed()
    model = make("mae_lm", {"mask_ratio": 0.25, "decoder_layers": 1, "delta": delta}).eval()
    model.encoder = Spy(model.encoder)
    nll, count = model.masked_nll(valid.blocks, valid.masked_at)
    (ids, _), = model.encoder.calls
    n = valid.masked_at.shape[1]
    assert count == valid.masked_at.numel() and ((ids == SPECIALS.mask).sum(1) == round(delta * n)).all()
    if delta == 0.0:  # no [MASK] in the encoder: MAE-LM's own step with no kept masks
        kept = torch.zeros_like(valid.blocks, dtype=torch.bool)
        own = model(valid.blocks, draws={"masked_at": valid.masked_at, "kept_masks": kept}).loss
        assert nll.item() / count == pytest.approx(own.item(), rel=1e-6)
    assert model.masked_nll(valid.blocks, valid.masked_at)[0].item() == pytest.approx(nll.item())  # fixed draw


def test_repeated_mlm_masks_every_copy_and_with_k_1_is_mlm():
    valid = fixed()
    model = make("repeated_mlm", {"k": 3, "mask_ratio": 0.15}).eval()
    model.encoder = Spy(model.encoder)
    nll, count = model.masked_nll(valid.blocks, valid.masked_at)
    (ids, _), = model.encoder.calls
    copies_masked = (ids == SPECIALS.mask).view(len(valid.blocks), SEQ_LEN, 3)
    chosen = mask_at(valid.masked_at, SEQ_LEN)
    assert (copies_masked == chosen[..., None]).all() and count == valid.masked_at.numel()

    once = make("repeated_mlm", {"k": 1, "mask_ratio": 0.15}).eval()
    mlm = make("mlm", {"mask_ratio": 0.15}).eval()  # the same seed: the same weights
    assert once.masked_nll(valid.blocks, valid.masked_at)[0].item() == pytest.approx(
        mlm.masked_nll(valid.blocks, valid.masked_at)[0].item(), rel=1e-6)


@pytest.mark.parametrize("transitions", ["dense", "sparse"])
def test_exlm_masked_nll_is_the_brute_force_sum_over_alignments(transitions):
    """-log Σ_paths Π E · Π P(y) over the masked tokens only, whatever the run's own mask_ratio
    (0.25 here, 2 masks a block; the validation positions are 1 a block)."""
    seq = 10
    valid = fixed(count=2, seq_len=seq)
    model = make("exlm", {"k": 2, "mask_ratio": 0.25, "transitions": transitions}, seq_len=seq).eval()
    nll, count = model.masked_nll(valid.blocks, valid.masked_at)
    seen = model.inspect(valid.blocks, {"masked_at": valid.masked_at})
    targets = valid.blocks.gather(1, valid.masked_at)
    log_p = seen.state_logits.float().log_softmax(-1)
    log_emit = log_p.gather(2, targets[:, None, :].expand(-1, log_p.shape[1], -1)).transpose(1, 2)
    expected = -brute_force_log_z(log_emit, seen.log_transitions).sum()
    assert count == valid.masked_at.numel() == 2
    torch.testing.assert_close(nll, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("transitions", ["dense", "none"])
def test_exlm_valid_loss_floor_is_the_dag_with_every_emission_certain(transitions):
    """`valid_loss_floor`: -log Σ_paths Π E with every P(y) = 1, what the transitions alone cost
    of `masked_nll`. The uniform DAG (`none`) has one per layout: here a block of 10 with one
    masked token, k = 2, so 6 states and Σ_u E[0, u] E[u, 5] = 1/5 (1/4 + 1/3 + 1/2 + 1) = 5/12."""
    seq = 10
    valid = fixed(count=2, seq_len=seq)
    model = make("exlm", {"k": 2, "mask_ratio": 0.25, "transitions": transitions}, seq_len=seq).eval()
    floor, count = model.masked_nll_floor(valid.blocks, valid.masked_at)
    seen = model.inspect(valid.blocks, {"masked_at": valid.masked_at})
    expected = -brute_force_log_z(torch.zeros_like(seen.log_emissions), seen.log_transitions).sum()
    assert count == valid.masked_at.numel() == 2
    torch.testing.assert_close(floor, expected.to(floor.dtype), rtol=1e-5, atol=1e-5)
    assert 0.0 < floor.item() < model.masked_nll(valid.blocks, valid.masked_at)[0].item()
    if transitions == "none":
        assert valid_loss_floor(model, [valid], batch=1, device="cpu",
                                precision="auto") == pytest.approx(-math.log(5 / 12))


@pytest.mark.parametrize("name, knobs", [(name, None) for name in sorted(OBJECTIVES) if name != "exlm"]
                         + [("exlm", {"transitions": "ctc"})])
def test_an_objective_without_a_dag_has_no_valid_loss_floor(name, knobs):
    model = make(name, knobs, specials=WITH_UNK)  # [UNK]: the per-mask CTC's blank
    assert valid_loss_floor(model, [fixed()], batch=4, device="cpu", precision="auto") == 0.0


@pytest.mark.parametrize("name", ["ar", "dar"])
def test_causal_objectives_report_their_own_fixed_loss(name):
    valid = fixed()
    model = make(name).eval()
    nll, count = model.masked_nll(valid.blocks, valid.masked_at)
    assert model.masked_nll(valid.blocks, valid.masked_at)[0].item() == pytest.approx(nll.item())
    if name == "ar":
        assert count == valid.blocks[:, 1:].numel()
        assert nll.item() / count == pytest.approx(objective_step(model, valid.blocks, 0).loss.item(), rel=1e-6)


def test_every_objective_says_what_its_valid_loss_measures():
    assert all(cls.valid_loss_measures for cls in OBJECTIVES.values())
    comparable = {name for name, cls in OBJECTIVES.items() if cls.valid_loss_measures.startswith("nats per masked")}
    assert comparable == {name for name, card in CARDS.items() if not card.causal}


def test_exlm_training_loss_is_its_valid_loss_spread_over_every_expanded_token_ends_included():
    """Why ExLM's training loss (log.csv) sits below its validation loss where MLM's two agree:
    at the same masks, the training loss is the same joint -log Z plus the first [CLS]'s and last
    [SEP]'s emissions, divided by the m + s expanded tokens (s: every [CLS]/[SEP], 2 in a block
    without inner ones), while the validation loss divides -log Z by the m masked tokens."""
    seq = 10
    valid = fixed(count=3, seq_len=seq)
    model = make("exlm", {"k": 2, "mask_ratio": 0.25}, seq_len=seq).eval()
    nll, m_total = model.masked_nll(valid.blocks, valid.masked_at)
    draws = {"masked_at": valid.masked_at}
    loss = model(valid.blocks, draws=draws).loss
    seen = model.inspect(valid.blocks, draws)
    log_p = seen.state_logits.float().log_softmax(-1)
    last = (seen.state_group >= 0).sum(dim=1) - 1  # each row's last state: its last [SEP]'s last clone
    ends = -(log_p[:, 0, SPECIALS.cls] + log_p[torch.arange(len(last)), last, SPECIALS.sep]).sum()
    rows, m = valid.masked_at.shape
    assert m_total == rows * m
    torch.testing.assert_close(loss * (m + 2) * rows, nll + ends, rtol=1e-5, atol=1e-5)
