"""The one encoder family every objective trains, so that differences come from the objective."""

from maskbench.model.encoder import Encoder, EncoderConfig, EncoderOutput
from maskbench.model.positions import POSITION_SCHEMES

__all__ = ["POSITION_SCHEMES", "Encoder", "EncoderConfig", "EncoderOutput"]
