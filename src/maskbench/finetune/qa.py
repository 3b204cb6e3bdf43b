"""Extractive question answering with unanswerable questions (SQuAD 2.0).

As the standard SQuAD 2.0 recipe (BERT, and the `run_qa` scripts of transformers):
- question + passage are tokenised together; passages longer than `max_len` become windows
  that overlap by `doc_stride` tokens;
- a linear layer gives start and end logits per token; the no-answer option is the span
  (0, 0), slot 0 of the logits; a window that does not contain the answer is trained on (0, 0);
- slot 0 holds the logits of the view's pooled position: [CLS] for bidirectional encoders, the
  last real token ([SEP]) for causal ones (AR, DAR), whose [CLS] state sees only itself and
  would give every input the same no-answer score;
- an example's best span is the highest start+end score over its windows (end ≥ start,
  at most `max_answer_tokens` tokens, inside the passage); its no-answer score is the lowest
  slot-0 score over windows; it is answered empty when no-answer − best span > threshold;
- the threshold is tuned on dev, separately for each metric as the official script does (F1
  at `best_f1_thresh`, EM at `best_exact_thresh`), and then applied unchanged to any other
  split; predictions are written at the headline metric's threshold.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from maskbench.eval.squad import best_null_threshold, squad_v2_scores
from maskbench.finetune.inputs import batches_by_length, collate
from maskbench.finetune.view import EncoderView

N_BEST = 20
# Our metric names → the official evaluation script's (its scores and `best_<name>_thresh`).
OFFICIAL = {"squad_v2_f1": "f1", "squad_v2_exact": "exact"}


class SpanHead(nn.Module):
    def __init__(self, view: EncoderView):
        super().__init__()
        self.view = view
        self.out = nn.Linear(view.width, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        view = self.view(input_ids, attention_mask)
        start, end = self.out(view.states).float().unbind(-1)
        blocked = attention_mask == 0
        return (null_at_slot_zero(start.masked_fill(blocked, -1e4), view.pool_position),
                null_at_slot_zero(end.masked_fill(blocked, -1e4), view.pool_position))


def null_at_slot_zero(logits: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
    """Move each row's logit at `position` (the pooled token) to slot 0, the no-answer slot, and
    block `position` itself so the option is not counted twice; the identity when the pooled
    token is [CLS]. The moved-from token is [SEP], never part of an answer span."""
    rows = torch.arange(logits.shape[0], device=logits.device)
    null = logits[rows, position]
    moved = logits.index_put((rows, position), torch.full_like(null, -1e4))
    moved[:, 0] = null
    return moved


def truncate_questions(questions: list[str], tokenizer, max_tokens: int) -> list[str]:
    """Cut each question after `max_tokens` tokens (BERT's SQuAD script keeps 64 of 384), so
    every window has room for passage tokens."""
    enc = tokenizer(questions, add_special_tokens=False, truncation=True, max_length=max_tokens,
                    return_offsets_mapping=True)
    return [q[: offsets[-1][1]] if offsets else q for q, offsets in zip(questions, enc["offset_mapping"])]


def windows(rows: list[dict], tokenizer, max_len: int, doc_stride: int) -> dict:
    """Tokenised windows: ids, the example each came from, context character offsets
    (None outside the passage) and the gold (start, end) token positions, (0, 0) if none.
    Questions keep at most a quarter of `max_len`; the overlap is capped to fit the rest.
    A split without rows has no windows (the tokenizer rejects an empty batch)."""
    max_question = max_len // 4
    passage_room = max_len - max_question - 3  # [CLS] question [SEP] passage [SEP]
    if passage_room < 2:
        raise ValueError(f"QA max_len={max_len} leaves no room for passage tokens; use at least 16")
    if not rows:
        return {"ids": [], "example": [], "offsets": [], "gold": []}
    questions = truncate_questions([r["question"] for r in rows], tokenizer, max_question)
    enc = tokenizer(questions, [r["context"] for r in rows], truncation="only_second", max_length=max_len,
                    stride=min(doc_stride, passage_room - 1), return_overflowing_tokens=True,
                    return_offsets_mapping=True)
    out = {"ids": enc["input_ids"], "example": list(enc["overflow_to_sample_mapping"]), "offsets": [], "gold": []}
    for w, offsets in enumerate(enc["offset_mapping"]):
        sequence_ids = enc.sequence_ids(w)
        offsets = [o if s == 1 else None for o, s in zip(offsets, sequence_ids)]
        out["offsets"].append(offsets)
        out["gold"].append(_gold_tokens(rows[out["example"][w]], offsets))
    return out


def _gold_tokens(row: dict, offsets: list) -> tuple[int, int]:
    answers = row["answers"]
    if not answers["text"]:
        return 0, 0
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    inside = [i for i, o in enumerate(offsets) if o is not None]
    if not inside or offsets[inside[0]][0] > start_char or offsets[inside[-1]][1] < end_char:
        return 0, 0
    start = next(i for i in inside if offsets[i][1] > start_char)
    end = next(i for i in reversed(inside) if offsets[i][0] < end_char)
    return start, end


def best_spans(rows, win, start_logits, end_logits, max_answer_tokens: int) -> tuple[dict, dict]:
    """(best non-empty answer text per id, no-answer score minus best span score per id)."""
    best = {r["id"]: (-np.inf, "") for r in rows}
    null = {r["id"]: np.inf for r in rows}
    for w, example in enumerate(win["example"]):
        row, offsets = rows[example], win["offsets"][w]
        s_logits, e_logits = start_logits[w][: len(offsets)], end_logits[w][: len(offsets)]  # drop batch padding
        null[row["id"]] = min(null[row["id"]], s_logits[0] + e_logits[0])
        for s in np.argsort(s_logits)[::-1][:N_BEST]:
            for e in np.argsort(e_logits)[::-1][:N_BEST]:
                if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > max_answer_tokens:
                    continue
                score = s_logits[s] + e_logits[e]
                if score > best[row["id"]][0]:
                    best[row["id"]] = (score, row["context"][offsets[s][0]:offsets[e][1]])
    answers = {qid: text for qid, (_, text) in best.items()}
    na_scores = {qid: float(null[qid] - best[qid][0]) for qid in best}
    return answers, na_scores


def tuned_thresholds(rows: list[dict], answers: dict, na_scores: dict) -> dict[str, float]:
    """Each metric's best no-answer threshold on these (dev) questions; "answer nothing" (−inf)
    becomes −1e9 so that it survives JSON."""
    best = best_null_threshold(rows, answers, na_scores)
    thresholds = {name: best[f"best_{official}_thresh"] for name, official in OFFICIAL.items()}
    return {name: float(t) if np.isfinite(t) else -1e9 for name, t in thresholds.items()}


class QATask:
    kind = "qa"

    def __init__(self, metric: str, splits: dict[str, list[dict]], tokenizer, max_len: int, doc_stride: int,
                 max_answer_tokens: int):
        self.metric, self.pad, self.max_answer_tokens = metric, tokenizer.pad_token_id, max_answer_tokens
        self.rows = splits
        self.win = {s: windows(rows, tokenizer, max_len, doc_stride) for s, rows in splits.items()}
        self.null_thresholds = dict.fromkeys(OFFICIAL, 0.0)

    @property
    def n_train(self) -> int:
        return len(self.win["train"]["ids"])

    @property
    def train_lengths(self) -> list[int]:
        return [len(x) for x in self.win["train"]["ids"]]

    def labelled(self, split: str) -> bool:
        return bool(self.rows.get(split))

    def build_model(self, view: EncoderView, dropout: float) -> nn.Module:
        return SpanHead(view)

    def loss(self, model: nn.Module, index: np.ndarray, device) -> torch.Tensor:
        win = self.win["train"]
        input_ids, mask = collate([win["ids"][i] for i in index], self.pad)
        start, end = model(input_ids.to(device), mask.to(device))
        gold = torch.tensor([win["gold"][i] for i in index], device=device)
        return (F.cross_entropy(start, gold[:, 0]) + F.cross_entropy(end, gold[:, 1])) / 2

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str, batch: int, device) -> tuple[dict, list[dict]]:
        """On dev, tunes each metric's no-answer threshold; other splits reuse them."""
        win, rows = self.win[split], self.rows[split]
        starts, ends = [None] * len(win["ids"]), [None] * len(win["ids"])
        for positions in batches_by_length(win["ids"], batch):
            input_ids, mask = collate([win["ids"][i] for i in positions], self.pad)
            s, e = model(input_ids.to(device), mask.to(device))
            for i, start_logits, end_logits in zip(positions, s.cpu().numpy(), e.cpu().numpy()):
                starts[i], ends[i] = start_logits, end_logits
        answers, na_scores = best_spans(rows, win, starts, ends, self.max_answer_tokens)
        if split == "dev":
            self.null_thresholds = tuned_thresholds(rows, answers, na_scores)
        metrics = {name: squad_v2_scores(rows, answers, na_scores, t)[OFFICIAL[name]] / 100
                   for name, t in self.null_thresholds.items()}
        metrics = {self.metric: metrics[self.metric], **metrics,
                   **{f"null_threshold_{OFFICIAL[name]}": t for name, t in self.null_thresholds.items()}}
        threshold = self.null_thresholds[self.metric]
        final = {r["id"]: "" if na_scores[r["id"]] > threshold else answers[r["id"]] for r in rows}
        records = [{"id": r["id"], "prediction": final[r["id"]], "no_answer_score": na_scores[r["id"]],
                    "gold": r["answers"]["text"]} for r in rows]
        return metrics, records
