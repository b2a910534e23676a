"""The LM head as the classifier: prompt the SLM with the task and class list, run one forward pass, and
read the LM head's logits for each class's first answer token; softmax over those K.

    slm-logits   answers are the class names
    slm-letters  answers are proxy letters A, B, C, ... listed against the classes

The head is the LM head sliced to K rows (K x hidden instead of vocab x hidden). It is pretrained, so it is
what head-only trains, and otherwise stays frozen: training changes the representation, not the decision.
"""

from __future__ import annotations

from headswap.strategies.base import Build, Strategy


class SLMLogits(Strategy):
    name = "slm-logits"
    description = "prompted SLM; LM head sliced to each class's first token, softmax over the K logits"
    needs_causal = True
    zero_shot = True
    prompted = True
    lm_head = True
    default_regime = "lora"
    multi_label = True
    chunkable = False     # the text sits inside the task prompt
    letters = False

    def text_encoder(self, b: Build):
        return b.prompt_encoder(letters=self.letters)

    def build(self, b: Build):
        from headswap.nn.classifier import Classifier
        from headswap.nn.heads import SlicedLMHead
        from headswap.text.prompts import answer_token_ids
        ids = answer_token_ids(b.tokenizer, b.prompt, b.labels)
        b.saved["answer_token_ids"] = ids
        head = SlicedLMHead.from_model(b.hf_model, ids, yes_scores=bool(b.params.get("multi_label")))
        return Classifier(b.body(), b.hidden, len(b.labels), pooling="last", head=head)

    def freeze(self, module, regime: str) -> None:
        if regime != "head-only":
            for name, p in module.head.named_parameters():
                p.requires_grad_(name == "offset")    # multi-label's per-class offsets always train


class SLMLetters(SLMLogits):
    name = "slm-letters"
    description = "as slm-logits, with proxy answers A, B, C, ... listed against the classes"
    letters = True
    multi_label = False
