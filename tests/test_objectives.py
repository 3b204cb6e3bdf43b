"""Every pretraining objective: its defining property (the papers' spec), that it learns a tiny
batch without NaN, what it exposes to analyses, and how fine-tuning presents inputs to it.
ExLM has its own module (test_objectives_exlm.py)."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from maskbench.model.encoder import Encoder
from maskbench.objectives.registry import (OBJECTIVES, Inspection, ObjectiveOutput, finetune_inputs,
                                  finetune_max_length)
from maskbench.objectives.ar import causal_mask
from maskbench.objectives.dar import group_index, two_stream_attention, two_stream_masks
from maskbench.objectives.masking import expand_tokens, mask_count, random_mask
from tests.helpers import (PRETRAINED_OBJECTIVES, SEQ_LEN, SPECIALS, VOCAB, Spy, blocks, make, objective_inspection,
                           objective_step)

# the objectives trained here (ExLM has its own module, test_objectives_exlm.py)
TRAINED = [name for name in PRETRAINED_OBJECTIVES if name != "exlm"]


def test_registry_names_every_objective_the_papers_compare():
    assert set(OBJECTIVES) == {"mlm", "repeated_mlm", "mae_lm", "exlm", "ar", "dar", "varlen_mlm", "none"}


@pytest.mark.parametrize("objective", TRAINED)
def test_overfits_a_tiny_batch_without_nan(objective):
    model = make(objective)
    tokens = blocks()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        out = objective_step(model, tokens, 1)  # the same masks every step
        optimizer.zero_grad()
        out.loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        optimizer.step()
        losses.append(out.loss.item())
    assert math.isfinite(losses[0]) and losses[-1] < losses[0] - 0.1, losses


@pytest.mark.parametrize("objective", TRAINED)
def test_inspection_exposes_predictions_and_hidden_states(objective):
    model = make(objective).eval()
    seen = objective_inspection(model, blocks(), 0, hidden_states=True)
    assert seen.logits.shape == (seen.labels.numel(), VOCAB)
    assert objective_step(model, blocks(), 0).num_predictions == seen.labels.numel()
    assert len(seen.hidden_states) == 3 and seen.hidden_states[0].shape[0] == 4
    assert objective_inspection(model, blocks(), 0).hidden_states is None   # only when asked for


@pytest.mark.parametrize("objective", sorted(set(OBJECTIVES) - {"exlm"}))
def test_forward_gives_training_the_loss_alone_and_inspect_what_it_is_the_cross_entropy_of(objective):
    """Pretraining reads a loss and its count, nothing else; the analyses read predictions and
    labels of the same step whose cross-entropy is that loss, so the two cannot drift apart.
    ExLM's loss is its DAG's, not a cross-entropy (test_objectives_exlm.py)."""
    model = make(objective)
    out, seen = objective_step(model, blocks(), 2), objective_inspection(model, blocks(), 2)
    assert type(out) is ObjectiveOutput and [f.name for f in dataclasses.fields(out)] == ["loss", "num_predictions"]
    assert type(seen) is Inspection
    torch.testing.assert_close(F.cross_entropy(seen.logits.float(), seen.labels), out.loss, rtol=0, atol=0)
    assert out.num_predictions == seen.labels.numel()


@pytest.mark.parametrize("objective,knobs,match", [
    ("mlm", {"mask_ratio": 1.5}, "mask_ratio"),
    ("repeated_mlm", {"k": 0}, "k"),
    ("mae_lm", {"delta": 2}, "delta"),
    ("mae_lm", {"decoder_layers": 0}, "decoder_layers"),
    ("dar", {"t": 0}, "t"),
    ("varlen_mlm", {"mask_ratio_min": 0.3, "mask_ratio_max": 0.2}, "mask_ratio_min"),
    ("mlm", {"p": 0.15}, "bad knobs"),
])
def test_bad_knobs_are_named(objective, knobs, match):
    with pytest.raises(ValueError, match=match):
        make(objective, knobs)


def test_unknown_objective_lists_the_valid_ones():
    with pytest.raises(ValueError, match="expected one of"):
        make("electra")


# --- masking helpers -------------------------------------------------------------------------

def test_random_mask_counts_are_exact_and_spare_the_margins():
    mask = random_mask(64, 20, 0.3, torch.Generator().manual_seed(0), margin=2)
    assert (mask.sum(1) == mask_count(16, 0.3)).all()
    assert not mask[:, :2].any() and not mask[:, -2:].any()


def test_expand_tokens_copies_flagged_tokens_k_times():
    expand = torch.tensor([[False, True, False, True]])
    layout = expand_tokens(expand, 3)
    assert layout.source.tolist() == [[0, 1, 1, 1, 2, 3, 3, 3]]
    assert layout.clone.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3]]
    assert layout.first.tolist() == [[0, 1, 4, 5]] and layout.real.all()


def test_expand_tokens_pads_a_row_that_flags_fewer():
    """Row 1 flags one token fewer: it ends with k - 1 = 1 padding slot copying its last token."""
    expand = torch.tensor([[True, False, True], [False, False, True]])
    layout = expand_tokens(expand, 2)
    assert layout.source.tolist() == [[0, 0, 1, 2, 2], [0, 1, 2, 2, 2]]
    assert layout.clone.tolist() == [[1, 2, 0, 1, 2], [0, 0, 1, 2, 0]]
    assert layout.first.tolist() == [[0, 2, 3], [0, 1, 2]]
    assert layout.real.tolist() == [[True] * 5, [True] * 4 + [False]]


# --- repeated MLM (ExLM §3.1, App. C) ------------------------------------------------------

@pytest.mark.parametrize("k,p", [(2, 0.3), (3, 0.45)])
def test_repeated_mlm_corrupts_a_p_to_the_k_share_of_tokens(k, p):
    """The share of original tokens whose k copies are all masked is p^k (App. C), measured on
    the [MASK]s the objective actually feeds its encoder and the positions it scores."""
    model = make("repeated_mlm", {"k": k, "mask_ratio": p}, seq_len=130)
    model.encoder = Spy(model.encoder)
    batch, body = 200, 128
    tokens = blocks(batch, 130)
    with torch.no_grad():
        seen = objective_inspection(model, tokens, 0)
    (ids, _), = model.encoder.calls
    assert torch.equal(ids[ids != SPECIALS.mask], tokens.repeat_interleave(k, dim=1)[ids != SPECIALS.mask])
    fed_masks = ids == SPECIALS.mask
    assert torch.equal(fed_masks, seen.input_is_mask)            # the scored positions are the [MASK]s
    n, m = body * k, mask_count(body * k, p)
    assert (fed_masks.sum(1) == m).all() and not fed_masks[:, :k].any() and not fed_masks[:, -k:].any()
    corrupted = fed_masks.view(batch, 130, k).all(dim=2)[:, 1:-1]
    # exact-count masking samples without replacement: P(all k) = prod (m - i) / (N - i) ~ p^k
    exact = math.prod((m - i) / (n - i) for i in range(k))
    assert exact == pytest.approx(p ** k, rel=0.05)
    stderr = math.sqrt(exact * (1 - exact) / corrupted.numel())
    assert abs(corrupted.float().mean().item() - exact) < 4 * stderr


def test_repeated_mlm_finetuning_repeats_tokens():
    ids = torch.tensor([[1, 5, 6, 2, 0]])
    mask = (ids != 0).long()
    info = {"objective": "repeated_mlm", "k": 2, "mask_ratio": 0.15}
    inputs = finetune_inputs(info, ids, mask)
    assert inputs.encoder_kwargs["input_ids"].tolist() == [[1, 1, 5, 5, 6, 6, 2, 2, 0, 0]]
    assert inputs.encoder_kwargs["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 1, 1, 1, 0, 0]]
    assert inputs.pool_position.tolist() == [0] and inputs.token_index.tolist() == [[0, 2, 4, 6, 8]]
    assert inputs.encoder_kwargs["input_ids"].gather(1, inputs.token_index).tolist() == ids.tolist()
    assert finetune_max_length(info, 64) == 32


# --- MAE-LM (Meng et al. §3, §4.3) --------------------------------------------------------

@pytest.mark.parametrize("delta,expected_masks", [(0.0, 0), (0.5, 2), (1.0, 4)])
def test_mae_lm_encoder_sees_delta_of_the_masks(delta, expected_masks):
    model = make("mae_lm", {"mask_ratio": 0.3, "decoder_layers": 1, "delta": delta})
    model.encoder = Spy(model.encoder)
    tokens = blocks(8)
    objective_step(model, tokens, 3)
    (ids, kwargs), = model.encoder.calls
    m = mask_count(SEQ_LEN - 2, 0.3)
    assert ids.shape == (8, SEQ_LEN - m + expected_masks)
    assert ((ids == SPECIALS.mask).sum(1) == expected_masks).all()
    # real tokens keep their original positions (aligned position encoding)
    assert torch.equal(tokens.gather(1, kwargs["positions"])[ids != SPECIALS.mask], ids[ids != SPECIALS.mask])


def test_mae_lm_decoder_is_not_in_the_saved_encoder(tmp_path):
    model = make("mae_lm", positions="absolute+relative_bias")
    model.encoder.save_pretrained(tmp_path)
    loaded = Encoder.from_pretrained(tmp_path)
    assert not any("decoder" in name for name in loaded.state_dict())
    assert set(loaded.state_dict()) == set(model.encoder.state_dict())
    assert any(name.startswith("decoder.") for name in model.state_dict())
    assert loaded.config.position_scheme == "absolute+relative_bias"



@pytest.mark.parametrize("positions,absolute,rotary", [("rope", False, True), ("absolute", True, False),
                                                       ("absolute+relative_bias", True, False),
                                                       ("rope+relative_bias", False, True)])
def test_mae_lm_decoder_locates_tokens_as_the_encoder_does(positions, absolute, rotary):
    """The decoder takes the run's position setting (arms differ only in the
    objective): learned absolute embeddings where the scheme has them, RoPE where it has it."""
    model = make("mae_lm", {"decoder_layers": 1}, positions=positions)
    assert (model.decoder.pos_emb is not None) == absolute and model.decoder.rotary == rotary
    # a decoder blind to positions would give the untouched tokens the same states when two
    # others swap places (attention is order-free over its keys); this one must not
    tokens = blocks(4)
    swapped = tokens.clone()
    swapped[:, [2, 9]] = tokens[:, [9, 2]]
    decoded, decoded_swapped = (model.decoder(model.encoder.tok_emb(t)) for t in (tokens, swapped))
    untouched = [i for i in range(tokens.shape[1]) if i not in (2, 9)]
    assert not torch.allclose(decoded[:, untouched], decoded_swapped[:, untouched], atol=1e-4)


# --- AR and DAR (Look Around §5.1, Eq. 6, Eq. 24) -------------------------------------------

def test_dar_masks_equal_eq_24_on_a_worked_example():
    """T = 7, t = 2, first group of size 1: f = [1, 2, 2, 3, 3, 4, 4]."""
    groups = group_index(torch.tensor([1]), 7, 2)
    assert groups.tolist() == [[1, 2, 2, 3, 3, 4, 4]]
    content, query = two_stream_masks(groups)
    f = groups[0].tolist()
    M_h = [[f[i] >= f[j] for j in range(7)] for i in range(7)]
    M_g = [[f[i] > f[j] for j in range(7)] for i in range(7)]
    assert content[0].tolist() == M_h and query[0].tolist() == M_g
    assert content[0].tolist()[1] == [1, 1, 1, 0, 0, 0, 0]   # token 1 sees its group-mate 2
    assert query[0].tolist()[2] == [1, 0, 0, 0, 0, 0, 0]     # but predicts 2 from group 1 only


def test_dar_with_t_1_is_ar():
    groups = group_index(torch.tensor([1]), 6, 1)
    assert groups.tolist() == [[1, 2, 3, 4, 5, 6]]
    content, query = two_stream_masks(groups)
    assert torch.equal(content[0], causal_mask(6)[0, 0])
    assert torch.equal(query[0], causal_mask(6)[0, 0].tril(-1))  # token i predicted from tokens < i
    model = make("dar", {"t": 1})
    out = objective_inspection(model, blocks(2), 0)
    ar = objective_inspection(make("ar"), blocks(2), 0)  # AR draws nothing
    assert torch.equal(out.labels, ar.labels)                     # the same targets, all but [CLS]


def test_dar_query_stream_never_sees_its_own_token_or_later_groups():
    """Change one token: only query-stream predictions of later groups may move."""
    model = make("dar", {"t": 3}).eval()
    tokens = blocks(1)
    base = objective_inspection(model, tokens, 5)
    groups = group_index(torch.randint(1, 4, (1,), generator=torch.Generator().manual_seed(5)), SEQ_LEN, 3)[0]
    predicted = (groups > 1).nonzero()[:, 0]
    for j in range(1, SEQ_LEN - 1):
        changed = tokens.clone()
        changed[0, j] = 4 + (changed[0, j] - 3) % (VOCAB - 4)
        out = objective_inspection(model, changed, 5)
        moved = (out.logits - base.logits).abs().amax(dim=1) > 1e-5
        assert not moved[groups[predicted] <= groups[j]].any(), j
        assert moved[groups[predicted] > groups[j]].all(), j


def test_two_stream_rows_are_never_empty():
    groups = group_index(torch.tensor([2, 1]), 5, 2)
    mask = two_stream_attention(groups)
    assert mask.shape == (2, 1, 10, 10) and mask.any(dim=-1).all()
    assert not mask[:, :, :, 5:][:, :, :5].any()   # the content stream never reads the query stream


@pytest.mark.parametrize("objective", ["ar", "dar"])
def test_causal_objectives_finetune_causally_on_the_last_real_token(objective):
    ids = torch.tensor([[1, 5, 6, 2, 0], [1, 7, 2, 0, 0]])
    inputs = finetune_inputs({"objective": objective}, ids, (ids != 0).long())
    assert inputs.pool_position.tolist() == [3, 2]
    assert torch.equal(inputs.encoder_kwargs["attn_mask"], causal_mask(5))


# --- variable-length MLM (Look Around Table 7) --------------------------------------------

def test_varlen_mlm_draws_one_ratio_per_batch_in_range():
    model = make("varlen_mlm", {"mask_ratio_min": 0.1, "mask_ratio_max": 0.5}, seq_len=42)
    counts = set()
    for seed in range(20):
        per_row = objective_inspection(model, blocks(3, 42), seed).input_is_mask.sum(1)
        assert (per_row == per_row[0]).all()
        counts.add(int(per_row[0]))
    assert min(counts) >= mask_count(40, 0.1) and max(counts) <= mask_count(40, 0.5) and len(counts) > 3


@pytest.mark.parametrize("objective", ["mlm", "mae_lm", "varlen_mlm"])
def test_bidirectional_objectives_finetune_on_cls(objective):
    ids = torch.tensor([[1, 5, 6, 2]])
    inputs = finetune_inputs({"objective": objective}, ids, torch.ones_like(ids))
    assert set(inputs.encoder_kwargs) == {"input_ids", "attention_mask"}
    assert inputs.pool_position.tolist() == [0] and inputs.token_index is None
