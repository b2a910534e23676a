"""Generate-then-parse as a classifier module: greedy generation from the prompt, parsed to a class."""

from __future__ import annotations

from collections import Counter
from typing import Callable

import torch
from torch import nn

from headswap.nn.classifier import ClassifierModule
from headswap.text.encoding import pad


class GenerateParseClassifier(ClassifierModule):
    """Naive LLM classification: generate greedily, then parse. Logits are 0 for the parsed class and
    -1e4 elsewhere (uniform when unparsed): generation gives no real class probabilities.

    Training is teacher-forced LM loss on the answer tokens, so forward takes `labels` and returns the loss.
    """

    head_prefixes = ()
    computes_own_loss = True

    def __init__(self, causal_lm: nn.Module, tokenizer, answers: list[str], answer_separator: str, pad_id: int,
                 parse: Callable[[str, list[str]], tuple[int | None, str]]):
        super().__init__()
        self.parse = parse   # output text, answers -> (class index or None, how it was parsed)
        self.body = causal_lm
        self.tokenizer = tokenizer
        self.answers = answers
        self.pad_id = pad_id
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        self.answer_ids = [tokenizer(answer_separator + a, add_special_tokens=False)["input_ids"] + eos
                           for a in answers]
        # Room for a short sentence around the answer (untrained models rarely answer with the bare class);
        # a trained model ends with EOS right after it, and generation stops once every row has.
        self.max_new_tokens = max(16, max(len(a) for a in self.answer_ids) + 2)
        self.parse_counts: Counter = Counter()
        self.last_outputs: list[str] = []

    def start_predict(self) -> None:
        self.parse_counts.clear()   # count each call's texts only

    def _rows(self, input_ids, attention_mask) -> list[list[int]]:
        return [ids[m.bool()].tolist() for ids, m in zip(input_ids, attention_mask)]

    def _lm_loss(self, rows, labels, class_weight=None):
        seqs = [r + self.answer_ids[int(y)] for r, y in zip(rows, labels)]
        ids, mask = pad(seqs, self.pad_id)
        target = torch.full_like(ids, -100)    # the loss covers the answer tokens only
        for i, (r, s) in enumerate(zip(rows, seqs)):
            target[i, len(r): len(s)] = torch.tensor(s[len(r):])
        dev = next(self.body.parameters()).device
        ids, mask, target = ids.to(dev), mask.to(dev), target.to(dev)
        if class_weight is None:
            return self.body(input_ids=ids, attention_mask=mask, labels=target).loss
        # Each answer token weighs its text's class weight; all weights 1 gives the model's own mean loss.
        logits = self.body(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        target = target[:, 1:]
        per_token = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
        w = class_weight.to(dev)[labels.to(dev)].unsqueeze(1) * (target != -100)
        return (per_token * w).sum() / w.sum()

    @torch.no_grad()
    def generate_text(self, rows: list[list[int]]) -> list[str]:
        ids, mask = pad(rows, self.pad_id, side="left")
        width = ids.shape[1]
        dev = next(self.body.parameters()).device
        out = self.body.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), do_sample=False,
                                 max_new_tokens=self.max_new_tokens, pad_token_id=self.pad_id)
        return self.tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)

    def forward(self, input_ids, attention_mask, labels=None, class_weight=None):
        rows = self._rows(input_ids, attention_mask)
        if labels is not None:
            return self._lm_loss(rows, labels, class_weight)
        outputs = self.generate_text(rows)
        self.last_outputs = outputs
        logits = torch.full((len(rows), len(self.answers)), -1e4)
        for i, text in enumerate(outputs):
            idx, how = self.parse(text, self.answers)
            self.parse_counts[how] += 1
            if idx is None:
                logits[i] = 0.0
            else:
                logits[i, idx] = 0.0
        return logits.to(input_ids.device)
