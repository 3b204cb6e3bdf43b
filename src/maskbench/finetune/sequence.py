"""Whole-sequence tasks: classification (GLUE-style), regression (STS-B, ESOL, …) and
multi-task binary classification with missing labels (MoleculeNet).

A pooler (dropout → dense → tanh → dropout) reads the pooled state and a linear layer gives
the outputs, as BERT/RoBERTa fine-tuning does. Regression targets are standardised with the
train split's mean and std (predictions are mapped back), which keeps one learning rate
workable across ESOL's log-solubility and FreeSolv's kcal/mol. Missing labels (NaN: molecules
without a measurement for a task) are masked out of the loss and of the metrics; ROC-AUC's
left-out tasks are named in the metrics (`roc_auc_skipped`). A split with no rows (a
predefined split the dataset lacks) is simply not labelled.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from maskbench.eval.metrics import all_scores, roc_auc_skipped
from maskbench.finetune.inputs import batches_by_length, collate, encode, row_order, target_json, targets
from maskbench.finetune.view import EncoderView


class SequenceHead(nn.Module):
    def __init__(self, view: EncoderView, n_outputs: int, dropout: float):
        super().__init__()
        self.view = view
        self.pooler = nn.Sequential(nn.Dropout(dropout), nn.Linear(view.width, view.width), nn.Tanh(),
                                    nn.Dropout(dropout))
        self.out = nn.Linear(view.width, n_outputs)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.out(self.pooler(self.view(input_ids, attention_mask).pooled))


class SequenceTask:
    """Rows → batches → loss and metrics, for one whole-sequence task."""

    def __init__(self, kind: str, metric: str, splits: dict[str, list[dict]], tokenizer, max_len: int,
                 names: list[str] | None):
        """`names`: class names (classification) or task names (multi-task), from the task card."""
        self.kind, self.metric, self.pad, self.names = kind, metric, tokenizer.pad_token_id, names
        self.ids = {s: encode(rows, tokenizer, max_len) for s, rows in splits.items()}
        self.y = {s: targets(rows) for s, rows in splits.items()}
        if kind == "classification":
            self.n_outputs = len(names)
        elif kind == "regression":
            self.y = {s: y.reshape(len(y), -1)[:, 0] if len(y) else y for s, y in self.y.items()}
            train = self.y["train"]
            self.mean, self.std = float(np.nanmean(train)), float(np.nanstd(train) or 1.0)
            self.n_outputs = 1
        elif kind == "multitask_classification":
            self.n_outputs = self.y["train"].reshape(len(self.y["train"]), -1).shape[1]
            self.y = {s: y.reshape(len(y), self.n_outputs) for s, y in self.y.items()}
        else:
            raise ValueError(f"kind {kind!r} is not a whole-sequence task")

    def labelled(self, split: str) -> bool:
        return split in self.y and len(self.y[split]) > 0 and not np.isnan(self.y[split]).all()

    @property
    def n_train(self) -> int:
        return len(self.ids["train"])

    @property
    def train_lengths(self) -> list[int]:
        return [len(x) for x in self.ids["train"]]

    def build_model(self, view: EncoderView, dropout: float) -> nn.Module:
        return SequenceHead(view, self.n_outputs, dropout)

    def loss(self, model: nn.Module, index: np.ndarray, device) -> torch.Tensor:
        input_ids, mask = collate([self.ids["train"][i] for i in index], self.pad)
        out = model(input_ids.to(device), mask.to(device)).float()
        y = torch.as_tensor(self.y["train"][index], dtype=torch.float32, device=device)
        if self.kind == "classification":
            return F.cross_entropy(out, y.long())
        if self.kind == "regression":
            return _over_known(F.mse_loss, out.squeeze(-1), (y - self.mean) / self.std)
        return _over_known(F.binary_cross_entropy_with_logits, out, y)

    @torch.no_grad()
    def predict(self, model: nn.Module, split: str, batch: int, device) -> np.ndarray:
        batches, outputs = batches_by_length(self.ids[split], batch), []
        for positions in batches:
            input_ids, mask = collate([self.ids[split][i] for i in positions], self.pad)
            out = model(input_ids.to(device), mask.to(device)).float()
            if self.kind == "classification":
                outputs.append(out.softmax(-1))
            elif self.kind == "regression":
                outputs.append(out.squeeze(-1) * self.std + self.mean)
            else:
                outputs.append(out.sigmoid())
        return torch.cat(outputs).cpu().numpy()[row_order(batches)]

    def evaluate(self, model: nn.Module, split: str, batch: int, device) -> tuple[dict, list[dict]]:
        """(metrics, per-example predictions) on `split` (metrics empty if it has no labels)."""
        outputs = self.predict(model, split, batch, device)
        metrics = all_scores(self.kind, self.metric, self.y[split], outputs) if self.labelled(split) else {}
        if metrics and self.kind == "multitask_classification":
            metrics["roc_auc_skipped"] = roc_auc_skipped(self.y[split], outputs, self.names)
        records = [{"index": i, "prediction": np.asarray(o).tolist(), "label": target_json(y)}
                   for i, (o, y) in enumerate(zip(outputs, self.y[split]))]
        return metrics, records


def _over_known(loss_fn, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """`loss_fn` over the labelled entries only (NaN targets are missing labels); zero, still
    attached to the graph, for a batch without any label."""
    known = ~torch.isnan(targets)
    if not known.any():
        return outputs.sum() * 0.0
    return loss_fn(outputs[known], targets[known])

