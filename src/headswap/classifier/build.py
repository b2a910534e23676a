"""The strategy's module on the base model, built for a TextClassifier (headswap.classifier.estimator), as one
object (Built) that owns it: the model loaded, the text encoder and prompt made, the regime's trainable parts
prepared, a saved model's weights (or a parent's, or a fitted head) loaded; and its part of the saved config."""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field, replace
from typing import Any

from headswap.errors import ConfigError
from headswap.saved import model_dir
from headswap.strategies import Build
from headswap.text.language_fit import warn_if_language_misfits
from headswap.text.vocab_fit import warn_if_inputs_alike
from headswap.train.lora import LoraSettings
from headswap.train.regimes import prepare


@dataclass
class Built:
    """What a TextClassifier runs: the module (torch, or an ONNX Runtime session behind the same interface), the
    text encoder and tokenizer its texts go through, the prompt, the LoRA settings, the resolved model, and what
    the strategy derived at build time (`saved`: answer_token_ids, ...). TextClassifier exposes each field with a
    trailing underscore (module_, encoder_, ...; headswap.classifier.attributes)."""

    module: Any
    encoder: Any
    tokenizer: Any
    prompt: Any = None
    lora: Any = None
    spec: Any = None                      # the resolved model (headswap.models); None for an ONNX export
    regime: str | None = None
    saved: dict = field(default_factory=dict)
    runtime: str = "torch"                # headswap.classifier.runtime.RUNTIMES
    param_counts: dict | None = None      # counted before int8 packing or from an export's summary
    started_from: str | None = None       # the fitted head a fine-tuning run started from (auto's warm start)

    def config(self) -> dict:
        """Its keys of the saved headswap_config.json, in the order the first saved format wrote them."""
        from headswap.models import model_reference_for_config
        return {"base_model": model_reference_for_config(self.spec), "regime": self.regime,
                "prompt": vars(self.prompt) if self.prompt else None, "answer_token_ids": None, **self.saved,
                "lora": self.lora.to_dict() if self.lora else None}

    def private(self) -> Built:
        """A copy that another thread can run beside this one (headswap serve's explanations): the same weights,
        shared rather than copied, but its own torch module objects (forward hooks, the train/eval switch, per-call
        counters) and its own encoder and tokenizer (a cross-encoder's turns truncation on and off between calls).
        An ONNX Runtime session stays shared: it may be run from several threads."""
        import torch
        encoder, tokenizer = copy.deepcopy((self.encoder, self.tokenizer))
        module = self.module
        if isinstance(module, torch.nn.Module):
            shared = {id(t): t for t in itertools.chain(module.parameters(), module.buffers())}
            module = copy.deepcopy(module, shared)
        return replace(self, module=module, encoder=encoder, tokenizer=tokenizer)


def build(clf, weights: dict | None = None, texts: list | None = None, restored: dict | None = None,
          start=None) -> Built:
    """The module for clf's settings and fitted_'s labels: for training on `texts` (from `start`: a parent model
    (headswap.classifier.init_from.Parent) or fitted heads [(name, state dict)], best first), or with a saved
    model's `weights` and config (`restored`)."""
    from headswap.models import check_positions, load_model, resolve_model

    params, strategy = clf.resolved_params(), clf.strategy_
    spec = resolve_model(clf.model)
    reason = strategy.fits(spec.kind)
    if reason:
        raise ConfigError(f"{reason} ({clf.model!r}); use e.g. model='smollm2-135m'")
    from headswap.quiet import no_progress_bars
    # Quiet: also the bars of a GGUF conversion (in load_model) and of the static tier's model2vec
    # distillation (in text_encoder), which tqdm draws on stderr past transformers' switch.
    with no_progress_bars(not clf.progress):
        hf_model, tokenizer, spec = load_model(spec, causal_lm_head=strategy.lm_head)
        if texts is not None:   # fitting, before any distillation or training: the base model's vocabulary
            warn_if_language_misfits(tokenizer, texts, clf.model)
        b = Build(params, hf_model, tokenizer, spec.kind, list(clf.labels_), clf.descriptions_,
                  zero_shot=clf.epochs == 0, texts=texts, restored=restored or {})
        b.encoder = strategy.text_encoder(b)
    if b.encoder is not None:   # the prompt's tokens are known only now
        check_positions(spec, clf.max_length, b.encoder.longest - clf.max_length, name=clf.model)
    module = strategy.build(b)
    b.hf_model = hf_model = None   # an unused LM head (vocab x hidden) is freed here
    module.eval()
    lora = prepare(module, params["regime"], zero_shot=b.zero_shot, last_n=clf.last_n,
                   lora=LoraSettings.from_params(params), train_embeddings=params["train_embeddings"])
    if not b.zero_shot:
        strategy.freeze(module, params["regime"])
    started_from = None
    if weights is not None:
        model_dir.load_weights(module, weights)
    elif texts is not None and hasattr(start, "load_into"):    # fit's init_from
        start.load_into(module)
    elif texts is not None and start:
        started_from = start_head(module, start)
    if texts is not None:
        _to_training_device(module)
    # The tokenizer the texts go through (export saves it): the base model's, or the strategy's own (static).
    own = getattr(b.encoder, "tokenizer", None)
    tokenizer = tokenizer if own is None else own
    if texts is not None:    # training texts that all encode alike (emoji through MiniLM: [UNK]) teach nothing
        warn_if_inputs_alike(tokenizer, texts, clf.model, max_length=clf.max_length)
    return Built(module, b.encoder, tokenizer, b.prompt, lora, spec, params["regime"], b.saved,
                 started_from=started_from)


def start_head(module, heads) -> str | None:
    """Load into module's head the first of `heads` ((name, state dict), best first) with the same parameters by
    name and shape; its name, or None when none fits. A fine-tuning run that starts from a head already fitted on
    the frozen body's features (linear probing, then fine-tuning: Kumar et al. 2022) begins at that head's score:
    its first minutes are not spent fitting a random head, and a random head's first gradients do not disturb
    the pretrained features."""
    head = getattr(module, "head", None)
    own = head.state_dict() if head is not None else {}
    for name, state in heads:
        if own and state.keys() == own.keys() and all(state[k].shape == own[k].shape for k in own):
            head.load_state_dict(state)
            return name
    return None


def _to_training_device(module) -> None:
    """On a GPU machine, a module built for training goes where accelerate will train it (this process's GPU)
    before fit: passes that run before the training loop (head-only features, cached lower blocks) run there too.
    A loaded model stays on the CPU."""
    import torch
    if torch.cuda.is_available():
        from accelerate import PartialState
        module.to(PartialState().device)
