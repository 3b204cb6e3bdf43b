"""The `none` control: no pretraining at all. The encoder stays at its seeded random
initialisation (0 training steps) and is then fine-tuned like every other run, so a table shows
what fine-tuning alone gets out of the architecture: the floor any objective has to beat.

It is an MLM in every other respect, so pretraining can still report a comparable validation
loss (MLM-style, at `mask_ratio`, of the untrained encoder: about ln |V|) and fine-tuning
presents inputs as it does for MLM encoders (the batch as is, pooled at [CLS])."""

from __future__ import annotations

from maskbench.objectives.mlm import MaskedLM


class NoPretraining(MaskedLM):
    name = "none"  # its card says it pretrains not at all: the pretraining loop runs 0 steps
