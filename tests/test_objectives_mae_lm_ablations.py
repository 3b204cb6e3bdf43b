"""MAE-LM Tab. 2's "Handling [MASK]" and "Decoder Size" ablations as knobs of `mae_lm` (§4.3):
what the encoder and the decoder read at the masked positions, and a decoder of another width
behind its projections; each knob at its default leaves MAE-LM as it was."""

import pytest
import torch

from maskbench.objectives.cards import card
from maskbench.objectives.masking import mask_at
from tests.helpers import SPECIALS, VOCAB, blocks, make, objective_inspection, objective_step, seeded_draws


def decoder_and_encoder_io(model, tokens, seed):
    """(draws, encoder input ids, encoder output states, decoder input) of one training step."""
    seen = {}
    hooks = [model.encoder.register_forward_hook(
                 lambda m, args, out: seen.update(ids=args[0], states=out.last_hidden_state)),
             model.decoder.register_forward_pre_hook(lambda m, args: seen.update(decoder=args[0]))]
    draws = seeded_draws(model, tokens, seed)
    model(tokens, draws)
    for hook in hooks:
        hook.remove()
    return draws, seen["ids"], seen["states"], seen["decoder"]


@pytest.mark.parametrize("resets", [False, True])
def test_enc_with_mask_dec_resets_mask_gives_the_decoder_the_mask_embedding(resets):
    """Tab. 2 "enc. w. [MASK], dec. resets [MASK]" (δ = 1): the encoder reads [MASK] at every
    masked position, and the decoder reads the [MASK] embedding there instead of the encoder's
    output; without the reset ("enc. w. [MASK] + dec.") it reads the encoder's output."""
    model = make("mae_lm", {"mask_ratio": 0.3, "decoder_layers": 1, "delta": 1.0, "decoder_resets_mask": resets})
    tokens = blocks(4)
    draws, ids, states, decoder_in = decoder_and_encoder_io(model, tokens, 3)
    masked = mask_at(draws["masked_at"], tokens.shape[1])
    assert ids.shape == tokens.shape and torch.equal(ids == SPECIALS.mask, masked)  # δ = 1: all positions, in order
    mask_embedding = model.encoder.tok_emb.weight[SPECIALS.mask]
    at_masks = decoder_in[masked]
    assert torch.equal(at_masks, mask_embedding.expand_as(at_masks)) == resets
    assert torch.equal(at_masks, states[masked]) != resets
    assert torch.equal(decoder_in[~masked], states[~masked])  # real tokens: the encoder's output either way


def test_random_replace_shows_the_encoder_real_tokens_where_the_masks_were():
    """Tab. 2 "random replace w. real token" (δ = 1): no [MASK] in the encoder's input; the masked
    positions hold tokens drawn from the vocabulary's non-special tokens (a fresh draw per step
    seed, the same for the same seed), the others the text; the decoder still predicts the text's
    tokens at the masked positions."""
    model = make("mae_lm", {"mask_ratio": 0.3, "decoder_layers": 1, "delta": 1.0, "masked_input": "random"})
    tokens = blocks(8)
    draws, ids, _, _ = decoder_and_encoder_io(model, tokens, 5)
    masked = mask_at(draws["masked_at"], tokens.shape[1])
    assert not (ids == SPECIALS.mask).any()
    shown = ids[masked]
    assert ((shown >= 4) & (shown < VOCAB)).all()  # helpers' specials are ids 0-3
    assert (shown != tokens[masked]).float().mean() > 0.8  # 1/36 of the draws hit the original token
    assert torch.equal(ids[~masked], tokens[~masked])
    assert torch.equal(seeded_draws(model, tokens, 5)["replacement"], draws["replacement"])
    assert not torch.equal(seeded_draws(model, tokens, 6)["replacement"], draws["replacement"])
    seen = objective_inspection(model, tokens, 5)
    assert torch.equal(seen.labels, tokens.gather(1, draws["masked_at"]).flatten())
    # MAE-LM itself draws no replacement (its steps' random numbers are those they always were)
    assert "replacement" not in seeded_draws(make("mae_lm"), tokens, 5)


def test_masked_nll_scores_a_random_replacement_run_on_fixed_inputs():
    model = make("mae_lm", {"mask_ratio": 0.3, "delta": 1.0, "masked_input": "random"}).eval()
    tokens = blocks(4)
    masked_at = seeded_draws(model, tokens, 0)["masked_at"]
    assert model.masked_nll(tokens, masked_at)[0] == model.masked_nll(tokens, masked_at)[0]


@pytest.mark.parametrize("width,heads", [(16, 1), (48, 3)])
def test_decoder_of_another_width_reads_and_writes_through_projections(width, heads):
    """Tab. 2 "4 layer, 512 / 1024 dimension" beside a 768-wide encoder: the decoder's blocks are
    `decoder_width` wide with the encoder's head width (16 here) and MLP ratio, a projection in
    and one back to the tied LM head; its gradients reach both."""
    model = make("mae_lm", {"decoder_layers": 2, "decoder_width": width})
    decoder = model.decoder
    assert decoder.width == width and decoder.proj_in.weight.shape == (width, 32)
    assert decoder.proj_out.weight.shape == (32, width)
    assert decoder.blocks[0].attn.n_head == heads and decoder.blocks[0].mlp.fc.weight.shape == (2 * width, width)
    out = objective_step(model, blocks(), 1)
    out.loss.backward()
    assert torch.isfinite(out.loss) and decoder.proj_in.weight.grad.abs().sum() > 0
    assert decoder.proj_out.weight.grad.abs().sum() > 0
    assert model.pretraining_info()["decoder_width"] == width


def test_the_encoders_width_needs_no_projection_and_a_width_off_the_head_grid_is_refused():
    assert make("mae_lm").decoder.proj_in is None and make("mae_lm", {"decoder_width": 32}).decoder.proj_out is None
    with pytest.raises(ValueError, match="decoder_width=24; expected a multiple of the encoder's head width 16"):
        make("mae_lm", {"decoder_width": 24})
    with pytest.raises(ValueError, match="masked_input='noise'"):
        make("mae_lm", {"masked_input": "noise"})


def test_the_cost_model_counts_a_wider_decoder_as_more_work():
    """maskbench plan's estimate: the encoder's width costs what it did; 512 less, 1024 more."""
    cost = card("mae_lm").passes
    size = {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": 3072}
    knobs = {**card("mae_lm").defaults, "decoder_layers": 4}
    flops = {w: cost(size, 512, {**knobs, "decoder_width": w}).flops(size, 32768) for w in (None, 512, 768, 1024)}
    assert flops[None] == flops[768] and flops[512] < flops[768] < flops[1024]


@pytest.mark.parametrize("attention", ["self+cross", "cross"])
def test_decoder_attention_variants_read_the_encoder_and_cross_alone_reads_no_other_position(attention):
    """Tab. 2 "bi. self-attention + cross-attention" and "cross-attention": the decoder's output
    moves with the encoder's outputs even where its own input is held fixed; with
    cross-attention alone, a position's output does not move when another position's input does
    (no self-attention), while with self-attention it does. RoPE turns both sides."""
    model = make("mae_lm", {"decoder_layers": 2, "decoder_attention": attention}).eval()
    decoder = model.decoder
    assert decoder.attention == attention and (decoder.blocks[0].attn is None) == (attention == "cross")
    g = torch.Generator().manual_seed(0)
    x, memory = torch.randn(2, 10, 32, generator=g), torch.randn(2, 6, 32, generator=g)
    where = torch.tensor([[0, 2, 3, 5, 7, 9]] * 2)
    base = decoder(x, memory, where)
    assert not torch.allclose(decoder(x, torch.randn(2, 6, 32, generator=g), where), base, atol=1e-4)
    assert not torch.allclose(decoder(x, memory, where.flip(1)), base, atol=1e-4)  # keys at their positions
    moved = x.clone()
    moved[:, 4] = torch.randn(2, 32, generator=g)  # not a constant shift, which a LayerNorm removes
    others = [i for i in range(10) if i != 4]
    unchanged = torch.allclose(decoder(moved, memory, where)[:, others], base[:, others], atol=1e-6)
    assert unchanged == (attention == "cross")
    out = objective_step(model.train(), blocks(), 1)
    out.loss.backward()
    assert torch.isfinite(out.loss) and decoder.blocks[0].cross.kv.weight.grad.abs().sum() > 0
    assert model.pretraining_info()["decoder_attention"] == attention


def test_default_decoder_takes_no_cross_attention():
    """MAE-LM's own decoder: bidirectional self-attention only (the encoder's blocks)."""
    model = make("mae_lm")
    assert model.decoder.attention == "self" and not any("cross" in name for name, _ in model.named_parameters())
    with pytest.raises(ValueError, match="decoder_attention='uni'"):
        make("mae_lm", {"decoder_attention": "uni"})
