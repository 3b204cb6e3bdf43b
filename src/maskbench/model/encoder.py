"""A Transformer encoder, pre-LN or post-LN, that saves and loads as a `transformers` model.

One model family for every objective: the objective decides what goes in (token ids,
positions, clone indices, an attention mask) and what comes out of the hidden states; the
encoder only maps inputs to per-layer states. The LM head is tied to the input embedding
(logits = LN(GELU(W h)) Eᵀ + b), as in BERT/RoBERTa, so ExLM's emissions and MLM's
predictions come from the same matrix that embeds the tokens.

    model = Encoder(EncoderConfig(vocab_size=8192, n_layer=2, n_embd=128, n_head=4))
    out = model(input_ids)                  # out.last_hidden_state: (B, T, n_embd)
    logits = model.lm_logits(out.last_hidden_state)
    model.save_pretrained("ckpt"); Encoder.from_pretrained("ckpt")

`block_norm` picks where the LayerNorms sit. `pre` (the default, and ExLM's official code): each
block computes x + f(LN(x)) and one LayerNorm closes the stack, which trains at a high learning
rate without warmup tricks. `post` (BERT/RoBERTa, MAE-LM's official code, fairseq's
`encoder_normalize_before: false` with `layernorm_embedding: true`): the embeddings pass a
LayerNorm, each block computes LN(x + f(x)), and nothing follows the last block.

`position_scheme` picks how positions enter (see `maskbench.model.positions`); objectives pass
`positions` (original token positions when they drop or repeat tokens) and, for 2-D RoPE,
`clone_index`.

`save_pretrained` copies this file and `positions.py` beside the weights and names their classes
in config.json's `auto_map`, so a checkpoint loads where maskbench is not installed:
`AutoModel` / `AutoModelForMaskedLM.from_pretrained(ckpt, trust_remote_code=True)`. That is why
this module and `positions.py` import nothing but torch and transformers, and each other
relatively.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput

from .positions import RelativePositionBias, apply_rotary, rotary_frame, scheme_parts

# what config.json's `auto_map` names: the auto class -> this module's class, as
# `trust_remote_code` finds it in the file saved beside the weights
_MODULE = __name__.rsplit(".", 1)[-1]
AUTO_MAP = {"AutoConfig": f"{_MODULE}.EncoderConfig", "AutoModel": f"{_MODULE}.Encoder",
            "AutoModelForMaskedLM": f"{_MODULE}.EncoderForMaskedLM"}


# where a block's LayerNorms sit: before each sublayer (x + f(LN(x))) or after the residual sum
# (LN(x + f(x)), with a LayerNorm on the embeddings)
BLOCK_NORMS = ("pre", "post")


def causal_mask(length: int, device=None) -> torch.Tensor:
    """(1, 1, T, T) boolean: query i may attend to keys j <= i."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]


class EncoderConfig(PretrainedConfig):
    model_type = "maskbench-encoder"

    def __init__(
        self,
        vocab_size: int = 8192,
        n_layer: int = 2,
        n_embd: int = 128,
        n_head: int = 4,
        n_inner: int | None = None,
        max_position: int = 512,
        position_scheme: str = "absolute",
        rope_base: float = 10000.0,
        relative_buckets: int = 32,
        relative_max_distance: int = 128,
        dropout: float = 0.1,
        layer_norm_eps: float = 1e-5,
        pad_token_id: int = 0,
        pretraining: dict | None = None,
        causal: bool = False,
        block_norm: str = "pre",
        **kwargs,
    ):
        parts = scheme_parts(position_scheme)
        if block_norm not in BLOCK_NORMS:
            raise ValueError(f"block_norm={block_norm!r}; expected one of {', '.join(BLOCK_NORMS)}")
        if n_embd % n_head:
            raise ValueError(f"n_embd={n_embd} must be divisible by n_head={n_head}")
        if "rope2d" in parts and (n_embd // n_head) % 4:
            raise ValueError(f"position_scheme='rope2d' needs a head size divisible by 4, got {n_embd // n_head}")
        if "rope" in parts and (n_embd // n_head) % 2:
            raise ValueError(f"position_scheme='rope' needs an even head size, got {n_embd // n_head}")
        self.vocab_size = vocab_size
        self.n_layer = n_layer
        self.n_embd = n_embd
        self.n_head = n_head
        self.n_inner = n_inner or 4 * n_embd
        self.max_position = max_position
        self.position_scheme = position_scheme
        self.rope_base = rope_base
        self.relative_buckets = relative_buckets
        self.relative_max_distance = relative_max_distance
        self.dropout = dropout
        self.layer_norm_eps = layer_norm_eps
        # What trained this encoder (objective name and knobs): fine-tuning reads it to
        # present inputs the way the encoder saw them (e.g. repeated tokens, clone index 0).
        self.pretraining = pretraining or {}
        # True when the objective trained the encoder under a causal mask (AR, DAR): a forward
        # given no `attn_mask` then attends causally, as the encoder learned to. Objectives pass
        # their own masks, so pretraining sets this only when it saves the encoder.
        self.causal = causal
        self.block_norm = block_norm
        self.auto_map = dict(AUTO_MAP)
        super().__init__(pad_token_id=pad_token_id, **kwargs)


class SelfAttention(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None, rotary=None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if rotary is not None:
            q, k = apply_rotary(q, rotary), apply_rotary(k, rotary)
        if attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.to(q.dtype)  # an additive bias must match q under autocast
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.dropout if self.training else 0.0
        )
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(B, T, C)))


class MLP(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, config.n_inner)
        self.proj = nn.Linear(config.n_inner, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Attention then MLP, each in a residual branch; `config.block_norm` puts each LayerNorm
    before its sublayer (pre) or after the residual sum (post)."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.post_norm = config.block_norm == "post"
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.attn = SelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None, rotary=None) -> torch.Tensor:
        if self.post_norm:
            x = self.ln_1(x + self.attn(x, attn_mask, rotary))
            return self.ln_2(x + self.mlp(x))
        x = x + self.attn(self.ln_1(x), attn_mask, rotary)
        return x + self.mlp(self.ln_2(x))


def closing_norm(config: EncoderConfig) -> nn.Module:
    """What follows a stack of blocks: a LayerNorm after pre-LN blocks, whose residual stream is
    never normalised otherwise; nothing after post-LN ones, whose last block ends in one."""
    return nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps) if config.block_norm == "pre" else nn.Identity()


class Encoder(PreTrainedModel):
    config_class = EncoderConfig
    base_model_prefix = "encoder"
    _supports_sdpa = True

    def __init__(self, config: EncoderConfig):
        super().__init__(config)
        parts = scheme_parts(config.position_scheme)
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Embedding(config.max_position, config.n_embd) if "absolute" in parts else None
        self.relative_bias = (RelativePositionBias(config.n_head, config.relative_buckets,
                                                   config.relative_max_distance, config.max_position)
                              if "relative_bias" in parts else None)
        self.rotary = "rope2d" if "rope2d" in parts else "rope" if "rope" in parts else None
        # post-LN blocks read normalised embeddings (BERT's embedding LayerNorm); pre-LN blocks
        # normalise their own inputs
        self.emb_ln = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps) if config.block_norm == "post" else None
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = closing_norm(config)
        self.lm_dense = nn.Linear(config.n_embd, config.n_embd)
        self.lm_ln = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.lm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.tok_emb

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        clone_index: torch.Tensor | None = None,
    ) -> BaseModelOutput:
        """Encode `input_ids` (B, T).

        attention_mask: (B, T), 1 for real tokens and 0 for padding (keys are masked).
        positions: (B, T) position ids; default 0..T-1 (objectives that drop or repeat
            tokens pass the original positions).
        attn_mask: (B or 1, 1, T, T) boolean, True where a query may attend to a key; for
            objectives with structured attention (causal, two-stream). None: every query
            attends to every key, or to the keys up to its own where `config.causal`.
        clone_index: (B, T) second coordinate of 2-D RoPE (ExLM): 1..k for the expanded states
            of a [MASK], [CLS] or [SEP], 0 (the default) for ordinary tokens. Only for a
            position_scheme with 'rope2d' in it.
        """
        B, T = input_ids.shape
        if positions is None:
            if T > self.config.max_position:
                raise ValueError(f"{T} tokens exceed max_position={self.config.max_position}")
            positions = torch.arange(T, device=input_ids.device).expand(B, T)
        else:
            # checked on the device, without the host sync (and torch.compile graph break) that
            # reading the maximum back would cost: on the CPU this raises a RuntimeError, on a
            # GPU it is a device-side assertion
            torch._assert_async(positions.max() < self.config.max_position,
                                f"a position exceeds max_position={self.config.max_position}")
        if clone_index is not None and self.rotary != "rope2d":
            raise ValueError(f"clone_index needs position_scheme='rope2d', not {self.config.position_scheme!r}")
        x = self.tok_emb(input_ids)
        if self.pos_emb is not None:
            x = x + self.pos_emb(positions)
        if self.emb_ln is not None:
            x = self.emb_ln(x)
        x = self.drop(x)
        rotary = None
        if self.rotary is not None:
            if self.rotary == "rope2d" and clone_index is None:
                clone_index = torch.zeros_like(positions)
            head_dim = self.config.n_embd // self.config.n_head
            rotary = rotary_frame(positions, clone_index, head_dim, self.config.rope_base)
        if attn_mask is None and self.config.causal:
            attn_mask = causal_mask(T, input_ids.device)
        mask = _combine_masks(attention_mask, attn_mask)
        if self.relative_bias is not None:
            # one additive bias for every layer, computed once per forward in the dtype the
            # attention runs in (bf16 under autocast), contiguous (B, H, T, T): what the fused
            # SDPA kernels that take an arbitrary bias (memory-efficient attention) need
            bias = self.relative_bias(positions).to(_attention_dtype(x))
            mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
        hidden = [x] if output_hidden_states else None
        for block in self.blocks:
            x = block(x, mask, rotary)
            if hidden is not None:
                hidden.append(x)
        x = self.ln_f(x)
        if hidden is not None:
            hidden[-1] = x
        return BaseModelOutput(last_hidden_state=x, hidden_states=tuple(hidden) if hidden else None)

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits through the head tied to the input embedding."""
        h = self.lm_ln(F.gelu(self.lm_dense(hidden)))
        return F.linear(h, self.tok_emb.weight, self.lm_bias)


def _attention_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype queries and keys will have: autocast's where it is on, else x's."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


def _combine_masks(attention_mask: torch.Tensor | None, attn_mask: torch.Tensor | None):
    """One boolean SDPA mask from key padding and structural masks (None when neither:
    SDPA then takes its fastest kernel)."""
    if attention_mask is None:
        return attn_mask
    keys = attention_mask.bool()[:, None, None, :]
    return keys if attn_mask is None else keys & attn_mask


class EncoderForMaskedLM(Encoder):
    """The encoder with its LM head's logits at every position: what `AutoModelForMaskedLM` and
    `pipeline("fill-mask")` call. The same weights as `Encoder` (the head is part of it), so any
    saved encoder loads as either. A causal encoder is refused: its head at a position predicts
    the next token, not the one there."""

    def __init__(self, config: EncoderConfig):
        if config.causal:
            raise ValueError(f"this encoder was pretrained under a causal mask (objective "
                             f"{config.pretraining.get('objective')!r}): its LM head at a position predicts the next "
                             "token, not a masked one; load it with AutoModel and read `model.lm_logits(hidden)` "
                             "as next-token logits")
        super().__init__(config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                output_hidden_states: bool = False, **encoder_kwargs) -> MaskedLMOutput:
        """Vocabulary logits (B, T, vocab_size) of every input position; `encoder_kwargs` as
        `Encoder.forward` takes them."""
        out = super().forward(input_ids, attention_mask, output_hidden_states=output_hidden_states, **encoder_kwargs)
        return MaskedLMOutput(logits=self.lm_logits(out.last_hidden_state), hidden_states=out.hidden_states)


# so that `save_pretrained` copies this module (and what it imports relatively) beside the weights
EncoderConfig.register_for_auto_class("AutoConfig")
Encoder.register_for_auto_class("AutoModel")
EncoderForMaskedLM.register_for_auto_class("AutoModelForMaskedLM")

if __package__ == "maskbench.model":  # imported as maskbench's module, not as a checkpoint's copy
    # so that in a maskbench process the auto classes load a checkpoint without remote code
    AutoConfig.register(EncoderConfig.model_type, EncoderConfig, exist_ok=True)
    AutoModel.register(EncoderConfig, Encoder, exist_ok=True)
    AutoModelForMaskedLM.register(EncoderConfig, EncoderForMaskedLM, exist_ok=True)
