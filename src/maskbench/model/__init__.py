"""The one encoder family every objective trains, so that differences come from the objective."""

from maskbench.model.encoder import Encoder, EncoderConfig, EncoderOutput

__all__ = ["Encoder", "EncoderConfig", "EncoderOutput"]
