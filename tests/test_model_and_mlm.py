"""The encoder round-trips through from_pretrained; MLM masks exactly and scores masked tokens only."""

from __future__ import annotations

import torch

from maskbench.model.encoder import Encoder, EncoderConfig
from maskbench.objectives.registry import MaskedLM, SpecialTokens, build_objective
from maskbench.objectives.masking import random_mask
from tests.helpers import objective_inspection, objective_step

SPECIALS = SpecialTokens(pad=0, cls=2, sep=3, mask=4)


def tiny_encoder(**kw) -> Encoder:
    torch.manual_seed(0)
    return Encoder(EncoderConfig(vocab_size=50, n_layer=2, n_embd=32, n_head=4, max_position=32, dropout=0.0, **kw))


def test_save_and_reload(tmp_path):
    model = tiny_encoder(pretraining={"objective": "mlm"}).eval()
    model.save_pretrained(tmp_path)
    reloaded = Encoder.from_pretrained(tmp_path).eval()
    x = torch.randint(5, 50, (2, 12))
    assert torch.equal(model(x).last_hidden_state, reloaded(x).last_hidden_state)
    assert reloaded.config.pretraining == {"objective": "mlm"}
    assert (tmp_path / "model.safetensors").exists()


def test_padding_does_not_change_real_token_states():
    model = tiny_encoder().eval()
    x = torch.randint(5, 50, (1, 8))
    padded = torch.cat([x, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 8), torch.zeros(1, 4)], dim=1).long()
    out = model(padded, attention_mask=mask).last_hidden_state[:, :8]
    assert torch.allclose(out, model(x).last_hidden_state, atol=1e-5)


def test_hidden_states_per_layer():
    out = tiny_encoder()(torch.randint(5, 50, (2, 6)), output_hidden_states=True)
    assert len(out.hidden_states) == 3


def test_mask_count_is_exact_and_spares_cls_sep():
    mask = random_mask(64, 20, 0.15, torch.Generator().manual_seed(0))
    assert (mask.sum(1) == round(0.15 * 18)).all()
    assert not mask[:, 0].any() and not mask[:, -1].any()


def test_mlm_replaces_every_masked_token_and_scores_only_those(monkeypatch):
    objective = MaskedLM(tiny_encoder(), SPECIALS, mask_ratio=0.25)
    tokens = torch.randint(5, 50, (4, 18))
    tokens[:, 0], tokens[:, -1] = SPECIALS.cls, SPECIALS.sep
    fed = {}
    original = objective.encoder.forward

    def spy(input_ids, *args, **kwargs):
        fed["inputs"] = input_ids
        return original(input_ids, *args, **kwargs)

    monkeypatch.setattr(objective.encoder, "forward", spy)
    seen = objective_inspection(objective, tokens, 1)
    masked = fed["inputs"] == SPECIALS.mask
    assert masked.sum(1).tolist() == [4] * 4  # no 80/10/10: every chosen position is [MASK]
    assert torch.equal(fed["inputs"][~masked], tokens[~masked])
    assert objective_step(objective, tokens, 1).num_predictions == 16 and torch.equal(seen.labels, tokens[masked])


def test_mlm_learns_a_fixed_batch():
    objective = build_objective({"objective": "mlm", "knobs": {"mask_ratio": 0.15}}, tiny_encoder(), SPECIALS)
    tokens = torch.randint(5, 50, (8, 16))
    optimizer = torch.optim.AdamW(objective.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss = objective_step(objective, tokens, 0).loss  # same masks: memorisable
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0]
