"""TextClassifier's fitted attributes, each declared here by name: what fit() learnt (kept in its fitted_, a
headswap.classifier.fitted.Fitted, whose fields say what each holds) and what was built (kept in its built_, a
headswap.classifier.build.Built). Each reads and writes the field it names; an unfitted classifier has none of them
(hasattr is False, as scikit-learn expects)."""

from __future__ import annotations


class Held:
    """A read-write attribute kept in the object an estimator holds as `holder` (fitted_, built_), at `path`
    (attribute names) inside it."""

    def __init__(self, holder: str, *path: str):
        self.holder, self.path = holder, path

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def _owner(self, obj):
        held = obj.__dict__.get(self.holder)
        if held is None:
            raise AttributeError(f"{self.name}: not fitted yet")
        for step in self.path[:-1]:
            held = getattr(held, step)
        return held

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return getattr(self._owner(obj), self.path[-1])

    def __set__(self, obj, value) -> None:
        setattr(self._owner(obj), self.path[-1], value)


class FittedAttributes:
    """The attributes; TextClassifier inherits them."""

    # what fit() learnt: headswap.classifier.fitted.Fitted's fields
    labels_ = Held("fitted_", "labels")
    classes_ = Held("fitted_", "classes")
    descriptions_ = Held("fitted_", "descriptions")
    class_weight_ = Held("fitted_", "class_weight")
    temperature_step_ = Held("fitted_", "temperature_step")
    balance_step_ = Held("fitted_", "balance_step")
    thresholds_step_ = Held("fitted_", "thresholds_step")
    reject_step_ = Held("fitted_", "reject_step")
    history_ = Held("fitted_", "history")
    best_epoch_ = Held("fitted_", "best_epoch")
    train_seconds_ = Held("fitted_", "train_seconds")
    build_seconds_ = Held("fitted_", "build_seconds")
    stopped_ = Held("fitted_", "stopped")
    trainable_params_ = Held("fitted_", "trainable_params")
    body_tuning_ = Held("fitted_", "body_tuning")
    evaluation_ = Held("fitted_", "evaluation")
    notes_ = Held("fitted_", "notes")
    chunk_aggregate_ = Held("fitted_", "chunk_aggregate")
    distillation_ = Held("fitted_", "distillation")
    parent_ = Held("fitted_", "parent")
    validation_proba_ = Held("fitted_", "validation_proba")
    validation_probas_ = Held("fitted_", "validation_probas")

    # the post-processing steps' state, under the names it had before there were steps
    temperature_ = Held("fitted_", "temperature_step", "temperature")
    balance_ = Held("fitted_", "balance_step", "balance")
    thresholds_ = Held("fitted_", "thresholds_step", "thresholds")
    reject_threshold_ = Held("fitted_", "reject_step", "threshold")
    oos_score_ = Held("fitted_", "reject_step", "entry")
    oos_statistics_ = Held("fitted_", "reject_step", "statistics")
    oos_index_ = Held("fitted_", "reject_step", "oos_index")   # the logit column of a learned out-of-scope class

    # what was built: headswap.classifier.build.Built's fields
    module_ = Held("built_", "module")
    encoder_ = Held("built_", "encoder")
    tokenizer_ = Held("built_", "tokenizer")
    prompt_ = Held("built_", "prompt")
    lora_ = Held("built_", "lora")
    model_spec_ = Held("built_", "spec")
    saved_ = Held("built_", "saved")
    runtime_ = Held("built_", "runtime")
    param_counts_ = Held("built_", "param_counts")
    started_from_ = Held("built_", "started_from")

    # what a strategy derived at build time and saves (Built.saved); a strategy without the key has no attribute
    @property
    def answer_token_ids_(self) -> list[int]:
        """The token of each label's answer (slm-logits)."""
        return self._saved("answer_token_ids")

    @property
    def prompt_language_(self) -> str:
        """The language the prompt was written in."""
        return self._saved("prompt_language")

    @property
    def static_vocabulary_(self) -> list[str]:
        """The words added to a static body's vocabulary from the training texts."""
        return self._saved("static_vocabulary")

    def _saved(self, key: str):
        saved = self.saved_
        if key not in saved:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {key + '_'!r} (its strategy "
                                 f"saves no {key!r})")
        return saved[key]
