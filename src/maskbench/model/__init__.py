"""The one encoder family every objective trains, so that differences come from the objective:
`encoder` (the Hugging Face model), `positions` (how it knows where a token is) and `schemes`
(which position scheme a run's encoder gets).

Nothing is imported here: `schemes` is read by params validation in every stage, which should
not load torch for it.
"""
