"""The strategy's module on the base model, built for a TextClassifier (headswap.api): the model loaded, the
text encoder and prompt made, the regime's trainable parts prepared, and a saved model's weights loaded."""

from __future__ import annotations

from headswap import model_dir
from headswap.errors import ConfigError
from headswap.strategies import Build
from headswap.text.language_fit import warn_if_language_misfits
from headswap.text.vocab_fit import warn_if_inputs_alike
from headswap.train.lora import LoraSettings
from headswap.train.regimes import prepare


def build(clf, weights: dict | None = None, texts: list | None = None, restored: dict | None = None) -> None:
    """Set clf's module_, encoder_, tokenizer_, prompt_, lora_, ... for its fitted_'s labels: for training on
    `texts`, or with a saved model's `weights` and config (`restored`)."""
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
    clf.lora_ = prepare(module, params["regime"], zero_shot=b.zero_shot, last_n=clf.last_n,
                        lora=LoraSettings.from_params(params), train_embeddings=params["train_embeddings"])
    if not b.zero_shot:
        strategy.freeze(module, params["regime"])
    if weights is not None:
        model_dir.load_weights(module, weights)
    elif texts is not None and vars(clf).get("parent_start_") is not None:    # fit's init_from
        vars(clf).pop("parent_start_").load_into(module)
    elif texts is not None and getattr(clf, "start_heads_", None):     # this fit's alone: not kept for the next
        clf.started_from_ = start_head(module, vars(clf).pop("start_heads_"))
    if texts is not None:
        _to_training_device(module)
    # The tokenizer the texts go through (export saves it): the base model's, or the strategy's own (static).
    own = getattr(b.encoder, "tokenizer", None)
    clf.tokenizer_ = tokenizer if own is None else own
    if texts is not None:    # training texts that all encode alike (emoji through MiniLM: [UNK]) teach nothing
        warn_if_inputs_alike(clf.tokenizer_, texts, clf.model, max_length=clf.max_length)
    clf.model_spec_, clf.encoder_, clf.prompt_ = spec, b.encoder, b.prompt
    clf.saved_, clf.module_ = b.saved, module
    clf.runtime_, clf.param_counts_ = "torch", None
    for key, value in b.saved.items():   # e.g. answer_token_ids_: what the strategy derived at build time
        setattr(clf, key + "_", value)


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
