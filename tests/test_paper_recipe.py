"""The mechanisms the `paper` profile switches on to follow the papers' official code: post-LN
blocks with an embedding LayerNorm (`pretrain.block_norm`), weight decay on every parameter
(`pretrain.weight_decay_on`), MAE-LM's decoder-input LayerNorm (knob `decoder_input_norm`)
and, through pretraining's setup, all three from params.yaml."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from maskbench.model.encoder import Block, Encoder, EncoderConfig, EncoderForMaskedLM
from maskbench.objectives.base import SpecialTokens
from maskbench.objectives.mae_lm import MaskedAutoencoderLM
from maskbench.train.optim import build_optimizer, param_groups
from tests.helpers import objective_step, smoke_config

SPECIALS = SpecialTokens(pad=0, cls=1, sep=2, mask=3, unk=4)


def config(**settings) -> EncoderConfig:
    return EncoderConfig(vocab_size=40, n_layer=2, n_embd=16, n_head=2, dropout=0.0, **settings)


def perturbed(module: torch.nn.Module) -> torch.nn.Module:
    """Every LayerNorm's gain and shift moved off (1, 0), so a test sees which one ran where."""
    torch.manual_seed(1)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return module


def layer_norm(ln: torch.nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps)


@pytest.mark.parametrize("block_norm", ["pre", "post"])
def test_a_block_computes_its_norm_placement(block_norm):
    """pre: x + f(LN(x)) per sublayer; post: LN(x + f(x)), computed here from the sublayers."""
    block = perturbed(Block(config(block_norm=block_norm))).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        if block_norm == "pre":
            h = x + block.attn(layer_norm(block.ln_1, x), None)
            expected = h + block.mlp(layer_norm(block.ln_2, h))
        else:
            h = layer_norm(block.ln_1, x + block.attn(x, None))
            expected = layer_norm(block.ln_2, h + block.mlp(h))
        assert torch.allclose(block(x, None), expected, atol=1e-6)


def test_a_post_ln_block_ends_normalised_and_a_pre_ln_one_does_not():
    x = 5 * torch.randn(2, 5, 16) + 3
    with torch.no_grad():
        post = Block(config(block_norm="post")).eval()(x, None)
        pre = Block(config(block_norm="pre")).eval()(x, None)
    assert torch.allclose(post.mean(-1), torch.zeros(2, 5), atol=1e-5)
    assert post.std(-1, unbiased=False).sub(1).abs().max() < 1e-3
    assert pre.mean(-1).abs().max() > 1   # the residual stream keeps the input's offset


def test_a_post_ln_encoder_normalises_its_embeddings_and_has_no_final_norm():
    post, pre = Encoder(config(block_norm="post")), Encoder(config(block_norm="pre"))
    assert isinstance(post.emb_ln, torch.nn.LayerNorm) and isinstance(post.ln_f, torch.nn.Identity)
    assert pre.emb_ln is None and isinstance(pre.ln_f, torch.nn.LayerNorm)
    post = perturbed(post).eval()   # learned absolute positions (the config's default scheme)
    ids = torch.randint(5, 40, (2, 7))
    with torch.no_grad():
        out = post(ids, output_hidden_states=True)
        x = layer_norm(post.emb_ln, post.tok_emb(ids) + post.pos_emb(torch.arange(7)))
        assert torch.allclose(out.hidden_states[0], x, atol=1e-6)
        for block in post.blocks:
            x = block(x, None)
        assert torch.allclose(out.last_hidden_state, x, atol=1e-5)


def test_an_unknown_block_norm_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="block_norm='sandwich'; expected one of pre, post"):
        config(block_norm="sandwich")


def test_a_post_ln_encoder_saves_and_reloads_as_one(tmp_path):
    model = perturbed(EncoderForMaskedLM(config(block_norm="post"))).eval()
    model.save_pretrained(tmp_path)
    again = EncoderForMaskedLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(5, 40, (1, 6))
    assert again.config.block_norm == "post"
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, again(ids).logits)


def test_a_checkpoint_without_block_norm_loads_pre_ln(tmp_path):
    """Encoders saved before the setting existed have no `block_norm` in config.json: pre-LN."""
    Encoder(config()).save_pretrained(tmp_path)
    saved = (tmp_path / "config.json").read_text().replace('"block_norm": "pre",', "")
    (tmp_path / "config.json").write_text(saved)
    assert "block_norm" not in saved
    assert Encoder.from_pretrained(tmp_path).config.block_norm == "pre"


def test_the_mae_lm_decoder_input_norm_normalises_what_the_first_block_reads():
    encoder = Encoder(config(position_scheme="absolute"))
    with_norm = MaskedAutoencoderLM(encoder, SPECIALS, decoder_layers=1, decoder_input_norm=True)
    without = MaskedAutoencoderLM(encoder, SPECIALS, decoder_layers=1)
    assert without.decoder.input_ln is None and isinstance(with_norm.decoder.input_ln, torch.nn.LayerNorm)
    assert with_norm.pretraining_info()["decoder_input_norm"] is True
    decoder = perturbed(with_norm.decoder).eval()
    seen = {}
    decoder.blocks[0].register_forward_pre_hook(lambda _, args: seen.update(x=args[0]))
    x = 4 * torch.randn(2, 6, 16) + 2
    with torch.no_grad():
        decoder(x)
        expected = layer_norm(decoder.input_ln, x + decoder.pos_emb(torch.arange(6)))
    assert torch.allclose(seen["x"], expected, atol=1e-6)


def test_the_mae_lm_decoder_follows_its_encoders_block_norm():
    objective = MaskedAutoencoderLM(Encoder(config(block_norm="post")), SPECIALS, decoder_layers=2)
    assert all(block.post_norm for block in objective.decoder.blocks)
    assert isinstance(objective.decoder.ln_f, torch.nn.Identity)


def test_decoder_input_norm_must_be_a_boolean():
    with pytest.raises(ValueError, match="decoder_input_norm='yes'; expected true or false"):
        MaskedAutoencoderLM(Encoder(config()), SPECIALS, decoder_input_norm="yes")


def test_weight_decay_on_matrices_spares_biases_and_norms_and_on_all_decays_everything():
    model = Encoder(config(block_norm="post"))
    everything = list(model.parameters())
    decayed, spared = param_groups(model, 0.01, "matrices")
    assert all(p.dim() >= 2 for p in decayed["params"]) and all(p.dim() == 1 for p in spared["params"])
    assert spared["weight_decay"] == 0.0
    assert {id(p) for p in spared["params"]} >= {id(model.emb_ln.weight), id(model.lm_bias)}
    decayed, spared = param_groups(model, 0.01, "all")
    assert {id(p) for p in decayed["params"]} == {id(p) for p in everything} and spared["params"] == []
    assert decayed["weight_decay"] == 0.01


def test_weight_decay_on_all_shrinks_a_bias_that_matrices_leaves_alone():
    """One AdamW step with zero gradients: only decoupled weight decay moves a parameter."""
    for decay_on, shrinks in (("matrices", False), ("all", True)):
        layer = torch.nn.Linear(2, 2)
        with torch.no_grad():
            layer.bias.fill_(1.0)
        opt = build_optimizer(layer, lr=0.1, weight_decay=0.5, decay_on=decay_on)
        for p in layer.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
        assert (layer.bias.detach() < 1.0).all().item() is shrinks


def test_an_unknown_weight_decay_scope_is_refused():
    with pytest.raises(ValueError, match="weight_decay_on='biases'; expected one of matrices, all"):
        param_groups(torch.nn.Linear(2, 2), 0.01, "biases")


def test_pretraining_builds_the_settings_it_is_given(corpus):
    """params.yaml's settings reach the model and optimizer pretraining builds: post-LN blocks,
    every parameter decayed, the MAE-LM decoder's input LayerNorm."""
    from maskbench.train.pretrain import setup

    settings = smoke_config(block_norm="post", weight_decay_on="all")
    settings["runs"]["mae_lm"]["knobs"]["decoder_input_norm"] = True
    state = setup(settings, "mae_lm", corpus / "tokens", corpus / "tokenizer")
    assert state.encoder.config.block_norm == "post" and state.encoder.emb_ln is not None
    assert state.objective.decoder.input_ln is not None
    assert sum(len(g["params"]) for g in state.optimizer.param_groups if g["weight_decay"] > 0) == \
        len([p for p in state.objective.parameters() if p.requires_grad])
    default = setup(smoke_config(), "mae_lm", corpus / "tokens", corpus / "tokenizer")
    assert default.encoder.config.block_norm == "pre" and default.objective.decoder.input_ln is None
    assert all(p.dim() >= 2 for g in default.optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"])


@pytest.mark.parametrize("objective", ["mlm", "mae_lm"])
def test_a_post_ln_encoder_learns_a_fixed_batch(objective):
    """The paper's post-LN arms train: a fixed batch and fixed masks are memorised, the MAE-LM
    decoder (post-LN too, its input normalised) included."""
    from maskbench.objectives.registry import build_objective

    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(vocab_size=50, n_layer=2, n_embd=32, n_head=4, max_position=32, dropout=0.0,
                                    block_norm="post"))
    knobs = {"mask_ratio": 0.15, **({"decoder_layers": 1, "decoder_input_norm": True} if objective == "mae_lm" else {})}
    model = build_objective({"objective": objective, "knobs": knobs}, encoder, SPECIALS)
    tokens = torch.randint(5, 50, (8, 16))
    optimizer = build_optimizer(model, lr=3e-3, weight_decay=0.01, decay_on="all")
    losses = []
    for _ in range(30):
        loss = objective_step(model, tokens, 0).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0]
