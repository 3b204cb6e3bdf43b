"""Position schemes of the encoder: save/load for every scheme, and what each scheme promises."""

import pytest
import torch

from maskbench.model.encoder import Encoder, EncoderConfig
from maskbench.model.positions import POSITION_SCHEMES, relative_bucket


def tiny(scheme: str, **kw) -> Encoder:
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=50, n_layer=2, n_embd=32, n_head=2, max_position=64,
                           position_scheme=scheme, dropout=0.0, relative_buckets=8,
                           relative_max_distance=16, **kw)
    return Encoder(config).eval()


@pytest.mark.parametrize("scheme", POSITION_SCHEMES)
def test_save_and_load_keep_outputs(scheme, tmp_path):
    model = tiny(scheme)
    ids = torch.randint(5, 50, (2, 12))
    kwargs = {"clone_index": torch.randint(0, 3, (2, 12))} if "rope2d" in scheme else {}
    model.save_pretrained(tmp_path)
    loaded = Encoder.from_pretrained(tmp_path).eval()
    assert loaded.config.position_scheme == scheme
    assert set(loaded.state_dict()) == set(model.state_dict())
    torch.testing.assert_close(loaded(ids, **kwargs).last_hidden_state, model(ids, **kwargs).last_hidden_state)


@pytest.mark.parametrize("scheme", ["rope", "rope2d", "relative_bias", "rope+relative_bias", "rope2d+relative_bias"])
def test_relative_schemes_ignore_a_shift_of_all_positions(scheme):
    model = tiny(scheme)
    ids = torch.randint(5, 50, (2, 10))
    positions = torch.arange(10).expand(2, 10)
    out = model(ids, positions=positions).last_hidden_state
    shifted = model(ids, positions=positions + 7).last_hidden_state
    torch.testing.assert_close(out, shifted, atol=1e-4, rtol=1e-4)


def test_absolute_scheme_sees_a_shift():
    model = tiny("absolute")
    ids = torch.randint(5, 50, (1, 10))
    positions = torch.arange(10)[None]
    assert not torch.allclose(model(ids, positions=positions).last_hidden_state,
                              model(ids, positions=positions + 7).last_hidden_state)


def test_rope2d_tells_clones_apart_only_by_clone_index():
    """Two [MASK] clones at the same position: identical states with the same clone index,
    different states with different ones (ExLM §4.2)."""
    model = tiny("rope2d")
    ids = torch.tensor([[1, 7, 4, 4, 9, 2]])          # 4 = a [MASK] expanded twice
    positions = torch.tensor([[0, 1, 2, 2, 3, 4]])
    same = model(ids, positions=positions, clone_index=torch.tensor([[0, 0, 1, 1, 0, 0]])).last_hidden_state
    apart = model(ids, positions=positions, clone_index=torch.tensor([[0, 0, 1, 2, 0, 0]])).last_hidden_state
    torch.testing.assert_close(same[0, 2], same[0, 3])
    assert not torch.allclose(apart[0, 2], apart[0, 3], atol=1e-4)


def test_rope2d_with_clone_index_zero_is_the_default():
    model = tiny("rope2d")
    ids = torch.randint(5, 50, (2, 8))
    torch.testing.assert_close(model(ids).last_hidden_state,
                               model(ids, clone_index=torch.zeros(2, 8, dtype=torch.long)).last_hidden_state)


def test_clone_index_rejected_without_rope2d():
    with pytest.raises(ValueError, match="clone_index"):
        tiny("rope")(torch.ones(1, 4, dtype=torch.long), clone_index=torch.zeros(1, 4, dtype=torch.long))


def test_bad_scheme_and_head_size_are_named():
    with pytest.raises(ValueError, match="position_scheme"):
        EncoderConfig(position_scheme="sinusoidal")
    with pytest.raises(ValueError, match="rope2d"):
        EncoderConfig(n_embd=12, n_head=2, position_scheme="rope2d")


def test_relative_buckets_follow_t5():
    rel = torch.tensor([0, 1, -1, 3, -3, 4, 100, -100, 1000])
    buckets = relative_bucket(rel, num_buckets=32, max_distance=128)
    # 16 buckets per direction, 8 exact ones; keys after the query use the upper half
    assert buckets[:5].tolist() == [0, 17, 1, 19, 3]
    assert buckets[5] == 20
    assert buckets[6] == 31 and buckets[7] == 15 and buckets[8] == 31
    assert buckets.max() < 32


def test_relative_bias_is_the_bucket_of_every_pair_gathered_contiguously():
    """The per-distance lookup gives exactly the T5 formula's bias for every (query, key) pair
    (what the encoder computed before it gathered per distance), as one contiguous tensor."""
    model = tiny("relative_bias")
    module = model.relative_bias
    positions = torch.sort(torch.randperm(64, generator=torch.Generator().manual_seed(0))[:40].view(2, 20)).values
    bias = module(positions)
    relative = positions[:, None, :] - positions[:, :, None]
    expected = module.bias(relative_bucket(relative, module.num_buckets, module.max_distance)).permute(0, 3, 1, 2)
    assert bias.shape == (2, 2, 20, 20) and bias.is_contiguous()
    assert torch.equal(bias, expected)
    weight = torch.randn(bias.shape, generator=torch.Generator().manual_seed(1))
    ours, = torch.autograd.grad((bias * weight).sum(), module.bias.weight)
    theirs, = torch.autograd.grad((expected * weight).sum(), module.bias.weight)
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_relative_bias_reaches_attention_as_a_fused_kernel_takes_it(monkeypatch, autocast):
    """One additive (B, H, T, T) bias, contiguous and already in the queries' dtype, the same
    tensor for every layer: no per-layer cast or copy, the form the memory-efficient SDPA kernel
    takes a bias in."""
    import maskbench.model.encoder as encoder_module
    seen = []
    sdpa = encoder_module.F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kwargs):
        seen.append((q.dtype, attn_mask))
        return sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(encoder_module.F, "scaled_dot_product_attention", spy)
    model = tiny("absolute+relative_bias")
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        model(torch.randint(5, 50, (2, 12)))
    assert len(seen) == model.config.n_layer
    for q_dtype, mask in seen:
        assert mask.shape == (2, 2, 12, 12) and mask.is_contiguous() and mask.dtype == q_dtype
        assert mask is seen[0][1]
    assert seen[0][0] == (torch.bfloat16 if autocast else torch.float32)


def test_positions_beyond_max_position_are_refused_without_a_host_sync():
    model = tiny("rope")
    with pytest.raises(ValueError, match="65 tokens exceed max_position=64"):
        model(torch.ones(1, 65, dtype=torch.long))
    with pytest.raises(RuntimeError, match="a position exceeds max_position=64"):
        model(torch.ones(1, 4, dtype=torch.long), positions=torch.tensor([[0, 1, 2, 64]]))
