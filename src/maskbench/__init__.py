"""maskbench: one workflow that regenerates the [MASK]-token experiments of MAE-LM,
"Look Ahead or Look Around?" and ExLM, from params.yaml to report tables."""

__version__ = "0.1.0"
