"""Pretraining objectives: each turns a batch of token blocks into model inputs and a loss.

The encoder never knows which objective trains it. Each objective has a card (`cards`: its
knobs and defaults, cost, whether it pretrains), read without torch by params validation, the
scheduler's estimates, the stage table and the reports, and a module with its class;
`registry.build_objective(run, encoder, specials)` builds the class a run's card names,
`registry.encoder_settings` tells pretraining what encoder it needs and
`registry.finetune_inputs` how fine-tuning presents a batch to an encoder it trained.

Nothing is imported here: the cards are read by params validation in every stage, which
should neither load torch nor depend on the objectives' code (a change to it re-runs only the
stages that import the registry).
"""
