"""MAE-LM (Meng et al., ICLR 2024, §3 and Fig. 2): masked positions are left out of the encoder,
so real-token representations may use every model dimension; a shallow bidirectional decoder
sees the encoder's outputs at real positions and [MASK] + position at masked ones, and predicts
the masked tokens. Only the encoder is kept: the decoder lives in this objective, not in the
encoder that pretraining saves for fine-tuning.

- Positions stay aligned with the original text (the encoder sees token i at position i). The
  paper's encoder also learns T5 relative position biases (App. C); here the encoder takes the
  run's shared `positions` setting, and the paper's scheme (`absolute+relative_bias`) and the
  "no relative position encoding" ablation of Table 2 (`absolute`) are runs' overrides.
  `aligned_positions: false` is Table 2's "misaligned position encoding" (§4.3): the encoder
  numbers its visible tokens consecutively 0, 1, 2, ..., skipping no index for the masked ones,
  so its positions no longer reflect where the tokens stood; the decoder keeps the original ones.
- `delta` (§4.3, Fig. 4) leaves that fraction of the [MASK] tokens in the encoder input; the
  decoder then reads the encoder's outputs there. δ = 0 is MAE-LM, δ = 1 standard MLM with a
  decoder.
- The decoder has no dropout (App. C) and shares the [MASK] embedding and the tied LM head with
  the encoder. It locates tokens the way the encoder does (the run's `positions`: its own
  learned absolute embeddings where the scheme has them, as the paper's decoder; rotary angles
  where it has RoPE): with learned absolute positions alone a tiny decoder cannot tell which
  [MASK] it predicts at the default budget and MAE-LM stays at the unigram loss (valid loss
  7.00 against 6.95 after 1,000 steps, while MLM with RoPE leaves it), so a decoder with its
  own scheme would compare position encodings, not objectives. The relative position bias is
  the encoder's only.
- `decoder_input_norm` (the official code: its decoder is a sentence encoder whose embedding
  LayerNorm normalises what it is given) passes the decoder's input, the encoder's outputs and
  [MASK] embeddings plus positions, through a LayerNorm before its first block. The decoder's
  blocks put their LayerNorms where the encoder's `block_norm` does.

Table 2's other ablations, each a knob that leaves MAE-LM as it is at its default:
- "Handling [MASK]" acts on the masked tokens the encoder sees (δ of them; the paper's rows
  have δ = 1). `decoder_resets_mask` ("enc. w. [MASK], dec. resets [MASK]") gives the decoder
  the [MASK] embedding there instead of the encoder's output, so the encoder's [MASK] states
  are never trained; `masked_input: random` ("random replace w. real token") shows the encoder a
  token drawn uniformly from the vocabulary's non-special tokens there instead of [MASK].
- "Decoder Size": `decoder_layers`, and `decoder_width` (the encoder's width when left out): a
  decoder of another width reads its input through a linear projection (§4.3: "a linear
  projection between the encoder's output and the decoder's input") and, since the LM head is
  the encoder's, tied to its embeddings, writes back through another one; its heads keep the
  encoder's head width and its MLP the encoder's expansion ratio.
- "Decoder Attention": `decoder_attention: self+cross` adds to each decoder block, after its
  bidirectional self-attention, a cross-attention to the encoder's outputs ("bi.
  self-attention + cross-attention"); `cross` keeps the cross-attention alone ("cross-attention"),
  so a decoder position reads the encoder and nothing of the other decoder positions. With
  RoPE, queries turn by their positions and the encoder's outputs by their original ones. Tab.
  2's third variant, "uni. self-attention + cross-attention" (BART-like decoding of the whole
  sequence), is not built: it changes what the loss covers, which the paper leaves unsaid.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from maskbench.model.encoder import MLP, Block, SelfAttention, closing_norm
from maskbench.model.positions import apply_rotary, rotary_frame, scheme_parts
from maskbench.objectives.base import Inspection, Objective, ObjectiveOutput, SpecialTokens, check_int, check_ratio
from maskbench.objectives.cards import card
from maskbench.objectives.masking import gather_rows, indices_of, mask_at, mask_count, random_mask, random_subset


DECODER_ATTENTION = ("self", "self+cross", "cross")  # MAE-LM Tab. 2's decoder attention (its uni. + cross: not built)


class CrossAttention(nn.Module):
    """Queries from the decoder's states, keys and values from the encoder's outputs (`memory`,
    `memory_width` wide), each turned by its own rotary frame where the scheme has RoPE."""

    def __init__(self, config, memory_width: int):
        super().__init__()
        self.n_head = config.n_head
        self.q = nn.Linear(config.n_embd, config.n_embd)
        self.kv = nn.Linear(memory_width, 2 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, rotary=None, memory_rotary=None) -> torch.Tensor:
        B, T, C = x.shape
        heads = lambda t: t.view(B, t.shape[1], self.n_head, C // self.n_head).transpose(1, 2)  # noqa: E731
        q, (k, v) = heads(self.q(x)), (heads(t) for t in self.kv(memory).split(C, dim=2))
        if rotary is not None:
            q, k = apply_rotary(q, rotary), apply_rotary(k, memory_rotary)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class CrossAttendingBlock(nn.Module):
    """A decoder block that reads the encoder's outputs: [bidirectional self-attention,]
    cross-attention, MLP, each in a residual branch with its LayerNorm where the encoder's
    `block_norm` puts it (before the sublayer, or after the residual sum)."""

    def __init__(self, config, memory_width: int, self_attention: bool):
        super().__init__()
        self.post_norm = config.block_norm == "post"
        self.attn = SelfAttention(config) if self_attention else None
        self.cross = CrossAttention(config, memory_width)
        self.mlp = MLP(config)
        self.norms = nn.ModuleList(nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
                                   for _ in range(2 + self_attention))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, rotary=None, memory_rotary=None) -> torch.Tensor:
        steps = [lambda h: self.cross(h, memory, rotary, memory_rotary), self.mlp]
        if self.attn is not None:
            steps.insert(0, lambda h: self.attn(h, None, rotary))
        for norm, step in zip(self.norms, steps):
            x = norm(x + step(x)) if self.post_norm else x + step(norm(x))
        return x


class ShallowDecoder(nn.Module):
    """Bidirectional Transformer blocks of the encoder's width and block norm, positions as the
    encoder's scheme gives them (learned absolute embeddings and/or RoPE over the original
    positions), the input LayerNorm-ed where `input_norm`."""

    def __init__(self, encoder_config, n_layer: int, input_norm: bool = False, width: int | None = None,
                 attention: str = "self"):
        super().__init__()
        config = copy.deepcopy(encoder_config)
        config.dropout = 0.0
        outer, head_dim = config.n_embd, config.n_embd // config.n_head
        if width is not None and width != outer:
            if width % head_dim:
                raise ValueError(f"decoder_width={width}; expected a multiple of the encoder's head width {head_dim}")
            config.n_head, config.n_inner, config.n_embd = width // head_dim, config.n_inner * width // outer, width
        self.width = config.n_embd
        self.proj_in = nn.Linear(outer, config.n_embd) if config.n_embd != outer else None
        self.proj_out = nn.Linear(config.n_embd, outer) if config.n_embd != outer else None
        parts = scheme_parts(config.position_scheme)
        self.pos_emb = nn.Embedding(config.max_position, config.n_embd) if "absolute" in parts else None
        self.rotary = any(part.startswith("rope") for part in parts)
        self.head_dim, self.rope_base = config.n_embd // config.n_head, config.rope_base
        self.input_ln = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps) if input_norm else None
        self.attention = attention
        self.blocks = nn.ModuleList(Block(config) if attention == "self" else
                                    CrossAttendingBlock(config, outer, self_attention=attention == "self+cross")
                                    for _ in range(n_layer))
        self.ln_f = closing_norm(config)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None,
                memory_positions: torch.Tensor | None = None) -> torch.Tensor:
        """`x` (B, T, encoder width) at positions 0..T-1; with cross-attention, `memory` the
        encoder's outputs (B, S, encoder width) at `memory_positions` (B, S)."""
        positions = torch.arange(x.shape[1], device=x.device)
        if self.proj_in is not None:
            x = self.proj_in(x)
        if self.pos_emb is not None:
            x = x + self.pos_emb(positions)
        if self.input_ln is not None:
            x = self.input_ln(x)
        rotary = rotary_frame(positions[None], None, self.head_dim, self.rope_base) if self.rotary else None
        if self.attention == "self":
            for block in self.blocks:
                x = block(x, None, rotary)
        else:
            memory_rotary = (rotary_frame(memory_positions, None, self.head_dim, self.rope_base)
                             if self.rotary else None)
            for block in self.blocks:
                x = block(x, memory, rotary, memory_rotary)
        x = self.ln_f(x)
        return x if self.proj_out is None else self.proj_out(x)


DEFAULTS = card("mae_lm").defaults
MASKED_INPUTS = ("mask", "random")  # what the encoder reads at the masked positions it sees


class MaskedAutoencoderLM(Objective):
    name = "mae_lm"
    valid_loss_measures = ("nats per masked token: cross-entropy of the decoder's predictions of the original "
                           "tokens at the fixed masked positions, left out of the encoder (δ of them as [MASK])")

    def __init__(self, encoder, specials: SpecialTokens, mask_ratio: float = DEFAULTS["mask_ratio"],
                 decoder_layers: int = DEFAULTS["decoder_layers"], delta: float = DEFAULTS["delta"],
                 aligned_positions: bool = DEFAULTS["aligned_positions"],
                 decoder_input_norm: bool = DEFAULTS["decoder_input_norm"],
                 decoder_resets_mask: bool = DEFAULTS["decoder_resets_mask"],
                 masked_input: str = DEFAULTS["masked_input"], decoder_width: int | None = DEFAULTS["decoder_width"],
                 decoder_attention: str = DEFAULTS["decoder_attention"]):
        super().__init__(encoder, specials)
        for knob, value in (("aligned_positions", aligned_positions), ("decoder_input_norm", decoder_input_norm),
                            ("decoder_resets_mask", decoder_resets_mask)):
            if not isinstance(value, bool):
                raise ValueError(f"{knob}={value!r}; expected true or false")
        if masked_input not in MASKED_INPUTS:
            raise ValueError(f"masked_input={masked_input!r}; expected one of {list(MASKED_INPUTS)}")
        if decoder_attention not in DECODER_ATTENTION:
            raise ValueError(f"decoder_attention={decoder_attention!r}; expected one of {list(DECODER_ATTENTION)}")
        self.aligned_positions, self.decoder_resets_mask, self.masked_input = (aligned_positions, decoder_resets_mask,
                                                                               masked_input)
        self.mask_ratio = check_ratio("mask_ratio", mask_ratio)
        if not 0.0 <= delta <= 1.0:
            raise ValueError(f"delta={delta}; expected 0 <= delta <= 1")
        self.delta = float(delta)
        width = None if decoder_width is None else check_int("decoder_width", decoder_width, 1)
        self.decoder = ShallowDecoder(encoder.config, check_int("decoder_layers", decoder_layers, 1),
                                      decoder_input_norm, width, decoder_attention)
        self.decoder.apply(encoder._init_weights)
        vocab = encoder.tok_emb.num_embeddings
        specials = {t for t in (specials.pad, specials.cls, specials.sep, specials.mask, specials.unk) if t is not None}
        # the vocabulary's real tokens, that `masked_input: random` draws from
        self.register_buffer("real_tokens", torch.tensor([t for t in range(vocab) if t not in specials]),
                             persistent=False)

    def pretraining_info(self) -> dict:
        return {"objective": self.name, "mask_ratio": self.mask_ratio, "decoder_layers": len(self.decoder.blocks),
                "delta": self.delta, "aligned_positions": self.aligned_positions,
                "decoder_input_norm": self.decoder.input_ln is not None,
                "decoder_resets_mask": self.decoder_resets_mask, "masked_input": self.masked_input,
                "decoder_width": self.decoder.width,
                "decoder_attention": self.decoder.attention}

    def masks_in_encoder(self, n_masked: int) -> int:
        """How many of `n_masked` masked tokens the encoder sees as [MASK] (δ of them)."""
        return round(self.delta * n_masked)

    def draw(self, tokens: torch.Tensor, generator: torch.Generator | None) -> dict:
        B, T = tokens.shape
        n_masked = mask_count(T - 2, self.mask_ratio)
        masked = random_mask(B, T, self.mask_ratio, generator, device=tokens.device)
        kept_masks = random_subset(masked, self.masks_in_encoder(n_masked), generator)
        return {"masked_at": indices_of(masked, n_masked), "kept_masks": kept_masks,
                **self.replacements(tokens.shape, generator, tokens.device)}

    def replacements(self, shape: torch.Size, generator: torch.Generator | None, device) -> dict:
        """With `masked_input: random`, a real token for every position (the kept masked ones
        read theirs), drawn uniformly; nothing (and no draw) with [MASK]."""
        if self.masked_input == "mask":
            return {}
        real = self.real_tokens.to(device)
        return {"replacement": real[torch.randint(len(real), shape, generator=generator, device=device)]}

    def _step(self, tokens: torch.Tensor, draws: dict,
              hidden_states: bool = False) -> tuple[ObjectiveOutput, Inspection]:
        B, T = tokens.shape
        masked_at, kept_masks = draws["masked_at"], draws["kept_masks"]
        n_masked = masked_at.shape[1]  # the draws' shape, not mask_ratio: masked_nll passes its own
        visible = ~mask_at(masked_at, T) | kept_masks
        n_visible = T - n_masked + self.masks_in_encoder(n_masked)
        index = indices_of(visible, n_visible)                            # original positions, in order
        shown = draws["replacement"] if self.masked_input == "random" else self.specials.mask
        encoder_input = torch.where(kept_masks, shown, tokens).gather(1, index)
        out = self.encoder(encoder_input, positions=index if self.aligned_positions else None,
                           output_hidden_states=hidden_states)

        width = out.last_hidden_state.shape[-1]
        encoded = torch.zeros(B, T, width, dtype=out.last_hidden_state.dtype, device=tokens.device)
        encoded = encoded.scatter(1, index[..., None].expand(-1, -1, width), out.last_hidden_state)
        mask_embedding = self.encoder.tok_emb.weight[self.specials.mask].to(encoded.dtype)
        from_encoder = visible & ~kept_masks if self.decoder_resets_mask else visible
        decoded = self.decoder(torch.where(from_encoder[..., None], encoded, mask_embedding), out.last_hidden_state,
                               index)

        logits = self.encoder.lm_logits(gather_rows(decoded, masked_at).flatten(0, 1))
        labels = tokens.gather(1, masked_at).flatten()
        loss = F.cross_entropy(logits.float(), labels)
        return (ObjectiveOutput(loss=loss, num_predictions=labels.numel()),
                Inspection(logits=logits, labels=labels, hidden_states=out.hidden_states,
                           input_is_mask=encoder_input == self.specials.mask))

    def masked_nll(self, tokens: torch.Tensor, masked_at: torch.Tensor) -> tuple[torch.Tensor, int]:
        """MAE-LM's own loss at those positions; with δ > 0, which of them the encoder sees as
        [MASK] is a fixed seeded draw, so every evaluation scores the same input."""
        masked = mask_at(masked_at, tokens.shape[1])
        generator = torch.Generator().manual_seed(0)
        kept = random_subset(masked.cpu(), self.masks_in_encoder(masked_at.shape[1]), generator)
        replaced = {k: v.to(masked.device) for k, v in self.replacements(tokens.shape, generator, "cpu").items()}
        out = self(tokens, {"masked_at": masked_at, "kept_masks": kept.to(masked.device), **replaced})
        return out.loss * out.num_predictions, out.num_predictions
