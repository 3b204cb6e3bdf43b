"""Controls that put every table cell in context: what a task gives without pretraining or
without a fine-tuned encoder at all.

- the `none` run (maskbench.objectives.none): the encoder untrained, fine-tuned like any arm;
- `maskbench baseline --task T` (maskbench.controls.baselines): trivial predictors and, for
  SMILES tasks, ECFP fingerprints with a linear model;
- `maskbench probe --run R --task T` (maskbench.controls.probe): linear models on every layer
  of a frozen pretrained encoder.

They learn from and are scored on the rows fine-tuning uses (maskbench.controls.rows), with
its metric code, and write predictions in its shape, so a bootstrap can rescore them alike.
"""

# The trivial baseline of each task kind: what a cell has to beat to have learned anything from
# its input (a pretrained arm must beat it and `none` for the task to decide; the report).
TRIVIAL = {"classification": "majority", "regression": "train_mean", "multitask_classification": "train_prior",
           "qa": "always_unanswerable"}
