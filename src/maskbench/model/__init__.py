"""The one encoder family every objective trains, so that differences come from the objective."""

from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

from maskbench.model.encoder import Encoder, EncoderConfig, EncoderForMaskedLM
from maskbench.model.positions import POSITION_SCHEMES

# in a process that imports maskbench, the auto classes find the encoder without remote code
AutoConfig.register(EncoderConfig.model_type, EncoderConfig, exist_ok=True)
AutoModel.register(EncoderConfig, Encoder, exist_ok=True)
AutoModelForMaskedLM.register(EncoderConfig, EncoderForMaskedLM, exist_ok=True)

__all__ = ["POSITION_SCHEMES", "Encoder", "EncoderConfig", "EncoderForMaskedLM"]
