"""TextClassifier: one scikit-learn style estimator for every strategy, regime and model.

    clf = TextClassifier(strategy="slm-logits", model="smollm2-135m", regime="lora", epochs=1)
    clf.fit(texts, labels)
    clf.predict_proba(["free entry! txt WIN"])
    clf.save("out/spam"); TextClassifier.load("out/spam")
Its keyword arguments are the settings declared in headswap.settings; the strategy (headswap.strategies)
builds the module, headswap.train trains it, headswap.saved.model_dir saves and reads it.
"""

from __future__ import annotations

import inspect
import logging
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin

from headswap import settings
from headswap.classifier import persist
from headswap.classifier.attributes import FittedAttributes
from headswap.classifier.build import Built, build
from headswap.classifier.fit_data import read_fit_data
from headswap.classifier.fitted import Fitted
from headswap.classifier.init_from import Parent
from headswap.classifier.reject_option import RejectOption, Settings
from headswap.data.load import from_lists
from headswap.decisions.postprocess import Balance, Temperature, Thresholds, oos_column
from headswap.decisions.targets import SingleLabel, check_known, targets_for
from headswap.errors import ConfigError, HeadswapError
from headswap.metrics import Metrics
from headswap.nn.inference import body_key, per_text, pooled_features, window_owners
from headswap.quiet import stderr_line, tqdm_write
from headswap.saved import model_dir
from headswap.strategies import get
from headswap.train.learned import check_learned
from headswap.train.logistic import check as check_head_fit
from headswap.train.logistic import train_logistic
from headswap.train.loop import TrainConfig, compute_features, fit, predict_logits
from headswap.train.regimes import count_parameters

log = logging.getLogger(__name__)


class TextClassifier(FittedAttributes, ClassifierMixin, BaseEstimator):
    """Train, use, save and reload a text classifier built from a small pretrained model.

    Settings (headswap.settings): strategy, model, regime (auto: the strategy's default), pooling, head,
    epochs (0 runs a zero-shot strategy untrained), learning rates, LoRA, ... checkpoint_dir: write a
    checkpoint there after every epoch; resume=True continues from it when it holds a complete one.
    Fitted attributes (labels_, classes_, history_, module_, ...): headswap.classifier.attributes.
    """

    def __init__(self, **params):
        defaults = settings.defaults()
        unknown = sorted(set(params) - set(defaults))
        if unknown:
            raise TypeError(f"TextClassifier got unknown settings {unknown}; see headswap.settings")
        for name, default in defaults.items():
            setattr(self, name, params.get(name, default))

    # scikit-learn reads the parameter names from __init__'s signature: derive it from the settings.
    __init__.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in settings.defaults().items()])

    # ---- resolved settings -------------------------------------------------------------------------
    @property
    def strategy_(self):
        return get(self.strategy)

    @property
    def regime_(self) -> str:
        return self.strategy_.default_regime if self.regime == "auto" else self.regime

    @property
    def target_(self) -> SingleLabel:
        """What a label is (headswap.decisions.targets): one class per text, or a set of them."""
        return targets_for(self.multi_label, self.label_separator)

    def resolved_params(self) -> dict:
        """The settings, checked (alone and against the strategy), with regime and body learning rate
        resolved. Raises ConfigError naming the first bad one; loads nothing."""
        params = self.get_params()
        settings.check(params)
        if not (params["class_weight"] is None or isinstance(params["class_weight"], (str, dict, Path))):
            raise ConfigError(f"class_weight must be None, 'balanced', a dict {{label: weight}} or a file path, "
                              f"got {type(params['class_weight']).__name__}")
        self.target_.check(params)
        params["regime"] = self.regime_
        params["body_lr"] = self.body_lr if self.body_lr is not None else (
            self.strategy_.full_body_lr if self.regime_ == "full" and self.strategy_.full_body_lr
            else settings.default_body_lr(self.regime_))
        params["head"] = self.strategy_.default_head if self.head == "auto" else self.head
        self.strategy_.check(params)
        check_head_fit(params)
        from headswap.models import check_positions
        check_positions(self.model, self.max_length)
        return params

    # ---- building the module (headswap.classifier.build) -------------------------------------------------
    def _build(self, weights: dict | None = None, texts: list | None = None, restored: dict | None = None,
               start=None) -> Built:
        """The strategy's module on the base model, for fitted_'s labels: for training on `texts` (from `start`: a
        parent model or fitted heads [(name, state dict)], best first), or with a saved model's `weights` and config
        (`restored`)."""
        self.built_ = build(self, weights, texts, restored, start)
        return self.built_

    def restore(self, weights: dict, config: dict) -> Built:
        """The module of a saved model, from its `weights` and `config` (headswap.classifier.persist.load)."""
        return self._build(weights=weights, restored=config)

    # ---- training ----------------------------------------------------------------------------------
    def fit(self, X, y=None, eval_texts=None, eval_labels=None, descriptions=None, *, soft_labels=None,
            labels=None, init_from=None, start_heads=None):
        """Train on texts X with labels y; validation data (given, or eval_fraction of X) picks the best epoch.

        init_from: a saved model's directory or a fitted TextClassifier to train on from
        (headswap.classifier.init_from). start_heads: heads fitted on this body's frozen features, [(name, state
        dict)] best first (auto's frozen rungs): the module starts from the first whose parameters fit its head.

        Or, single-label only, on soft_labels: an (N, K) matrix of probabilities over the class names `labels`
        (a teacher's predict_proba; headswap.jobs.distill), with the cross-entropy to them as the loss. The classes
        are then `labels`, in that order; validation data still has real labels, and without it the eval_fraction
        split is scored against each row's most probable class.

        Its steps: read the data (headswap.classifier.fit_data), start what is learnt (fitted_), build the module,
        train it, calibrate on the validation data."""
        parent = None if init_from is None else Parent.adopted_by(self, init_from, soft_labels)
        params = self.resolved_params()
        data = read_fit_data(self, X, y, eval_texts, eval_labels, descriptions, soft_labels, labels, parent)
        self._start_fitted(data, parent)
        torch.manual_seed(self.seed)
        t0 = time.perf_counter()
        self._build(texts=data.train.texts, start=parent if parent is not None else start_heads)
        self.build_seconds_ = time.perf_counter() - t0
        if self.epochs == 0:
            self.trainable_params_ = 0
            if data.val is not None:     # nothing trains, but given validation data still calibrates
                if Settings.of(self).wants_statistics(self.strategy_.pooled_features):
                    self.reject_step_.fit_statistics_on_texts(self, data.train.texts, data.train.labels, data.labels,
                                                              self.seed)
                y_val = data.y_val(self.target_)
                self._calibrate(self._validation_logits(*self._item_logits(data.val.texts), y_val), y_val,
                                oos_texts=data.val_outside, texts=data.val.texts)
            return self
        self._train(data, params)
        return self

    def _start_fitted(self, data, parent) -> None:
        """fitted_ for data's classes, its post-processing steps not yet fitted; the reject option's data checked."""
        target = self.target_
        # A multi-label model always saves its thresholds (0.5 until validation data tunes them): loading
        # refuses a multi-label config without them, which is what a flipped single-label config looks like.
        self.fitted_ = Fitted(data.labels, data.classes, data.descriptions,
                              class_weight=target.class_weight(self.class_weight, data.labels, data.train.labels),
                              temperature_step=Temperature(target=target), balance_step=Balance(target=target),
                              thresholds_step=Thresholds([0.5] * len(data.labels) if target.multi_label else None,
                                                         target),
                              reject_step=RejectOption(oos_column(data.labels, self.out_of_scope)),
                              parent=parent.record(data.labels) if parent is not None else None)
        # Chunked texts' window logits are aggregated as set; 'auto' starts as mean (what validation during
        # training scores) and is chosen on the validation data once training is done (_validation_logits).
        self.chunk_aggregate_ = None if self.chunk_stride is None else (
            "mean" if self.chunk_aggregate == "auto" else self.chunk_aggregate)
        self.notes_.extend(self.reject_step_.check_data(Settings.of(self), data.labels, data.val, data.val_outside))

    def _train(self, data, params) -> None:
        """Train the built module on data.train, keeping the epoch that validates best; then calibrate."""
        soft = data.soft is not None
        y_train, y_val = data.y_train(self.target_), data.y_val(self.target_)
        # Chunking: each window of a long text is a training item with its text's label (the usual recipe for
        # texts longer than the model's window); validation aggregates the windows back to one row per text.
        train_items = self.encoder_.encode(data.train.texts, y_train)
        for note in (self.encoder_.report_truncation(len(data.train), "training texts"),
                     self.encoder_.report_split(len(data.train), len(train_items), "training texts")):
            if note:
                self.notes_.append(note)
        val_items = self.encoder_.encode(data.val.texts, y_val) if data.val is not None else None
        windows = val_items     # kept: feature caching below replaces the items and their text indices
        weights = self.class_weight_
        cfg = TrainConfig(**{**{k: params[k] for k in TrainConfig.__dataclass_fields__ if k in params},
                             "epochs": max(self.epochs, 1),
                             "class_weight": [weights[lab] for lab in data.labels] if weights else None,
                             "checkpoint_dir": str(self.checkpoint_dir) if self.checkpoint_dir else None,
                             "soft_targets": soft})
        t0 = time.perf_counter()
        item_targets = y_train if window_owners(train_items) is None else [it["label"] for it in train_items]
        if soft:    # a body-tuning phase (setfit's pairs) reads classes: each text's most probable
            item_targets = [int(np.argmax(t)) for t in item_targets]
        self.body_tuning_ = self.strategy_.prepare_body(self.module_, self.encoder_, train_items, item_targets, params,
                                                        cfg)
        module, collate = self.module_, self.encoder_.collate
        if self.regime_ == "head-only" and module.feature_cacheable:
            # The frozen body gives each text the same features every epoch: compute them once. They are
            # recomputed (identically) on resume; the checkpoint holds the head alone. time_limit counts them in.
            train_items, val_items, module, collate = self._on_features(train_items, val_items, cfg)
        elif self.head_fit == "logistic":
            raise ConfigError(f"head_fit 'logistic' needs a head trained on cached frozen features; strategy "
                              f"{self.strategy!r} with pooling {self.pooling!r} has none (use head_fit 'loop')")
        elif self.cache_lower:    # the frozen lower blocks run once per text
            from headswap.train.lower_cache import build_cache
            train_items, val_items, module, collate = build_cache(module, self.last_n, train_items, val_items,
                                                                  collate, self.eval_batch_size, body_key(self))
        trainer = train_logistic if self.head_fit == "logistic" else partial(
            fit, collate=collate, notify=stderr_line if not self.progress else tqdm_write)
        result = trainer(module, train_items, cfg=cfg, eval_items=val_items, eval_labels=y_val,
                         label_names=data.labels, positive_label=self.positive_label,
                         log=log.info if not self.progress else tqdm_write,
                         eval_per_text=lambda logits: per_text(logits, windows, self.chunk_aggregate_))
        self.stopped_ = result.stopped
        if result.stopped:
            self.notes_.append(f"training stopped early: {result.stopped}; the best validated weights were kept")
        self.train_seconds_ = time.perf_counter() - t0
        self.history_ = [vars(h) for h in result.history]
        check_learned(self, data.train.labels, soft_targets=soft, multi_label=self.target_.multi_label)
        self.best_epoch_ = result.best_epoch
        self.trainable_params_ = count_parameters(self.module_)
        self.module_.eval()
        if val_items is not None:
            logits = result.best_eval_logits
            if logits is None:   # the kept epoch was scored before a resume
                logits = predict_logits(module, val_items, collate, self.eval_batch_size)
            if Settings.of(self).wants_statistics(self.strategy_.pooled_features):    # on the kept epoch's features
                self.reject_step_.fit_statistics(pooled_features(self.module_, train_items, self.encoder_.collate,
                                                                 self.eval_batch_size, self.progress), item_targets,
                                                 seed=self.seed)
            logits = self._validation_logits(windows, logits, y_val)
            self._calibrate(logits, y_val, oos_texts=data.val_outside, texts=data.val.texts)
            # what predict_proba gives the validation texts, free here: auto blends candidates on it, and checks
            # out of fold the pick of the kept weights among every validation's (validation_probas_)
            proba = self.temperature_step_.apply
            self.validation_proba_ = proba(np.asarray(logits, dtype=np.float32))
            self.validation_probas_ = [proba(np.asarray(per_text(l, windows, self.chunk_aggregate_), np.float32))
                                       for l in result.eval_logits]

    def _on_features(self, train_items, val_items, cfg):
        from headswap.nn.inference import Deadline, cached_features
        from headswap.nn.classifier import HeadOnFeatures, collate_features
        from headswap.train.checkpoint import data_digest

        body, cfg.clock_start = body_key(self), time.perf_counter()

        def cached(items, which):
            key = None if body is None else body + (data_digest([it["input_ids"] if isinstance(it, dict) and
                                                                 "input_ids" in it else it for it in items]),)
            feats = cached_features(key, lambda: compute_features(
                self.module_, items, self.encoder_.collate, self.eval_batch_size, self.progress,
                f"caching {which} features", Deadline.of(cfg.clock_start, cfg.time_limit, f"the {which} texts")))
            return [{"features": f, **{k: it[k] for k in ("label", "text") if k in it}} for f, it in zip(feats, items)]
        val = cached(val_items, "validation") if val_items else None
        return cached(train_items, "training"), val, HeadOnFeatures(self.module_.head), collate_features

    def _validation_logits(self, items, logits, y):
        """One row per validation text; with chunk_aggregate 'auto', first the aggregation that scores better
        there by the selection metric (mean on a tie)."""
        if window_owners(items) is not None and self.chunk_aggregate == "auto":
            from headswap.train.loop import score_logits
            scores = {how: score_logits(per_text(logits, items, how), y, list(self.labels_),
                                        self.positive_label).score(self.metric) for how in ("mean", "max")}
            self.chunk_aggregate_ = max(scores, key=scores.get)
            note = (f"chunk_aggregate auto: {self.chunk_aggregate_} (validation {self.metric}: mean "
                    f"{scores['mean']:.4f}, max {scores['max']:.4f})")
            log.info(note)
            self.notes_.append(note)
        return per_text(logits, items, self.chunk_aggregate_)

    # ---- after training: the post-processing steps (headswap.decisions.postprocess) -------------------------
    def _calibrate(self, logits, y, fit_temperature: bool | None = None, oos_texts: list[str] | None = None,
                   texts: list[str] | None = None) -> None:
        """Fit the post-processing steps in order on validation logits (of `texts`): the temperature (when
        fit_temperature, default the temperature_scaling setting), the decision thresholds on the calibrated
        probabilities, and with out_of_scope set, the reject option (on these texts and the out-of-scope
        `oos_texts`; headswap.classifier.reject_option.RejectOption)."""
        # float32, as predict_proba's logits are: the steps fit on the values they will be applied to
        logits = np.asarray(logits, dtype=np.float32)
        if self.temperature_scaling if fit_temperature is None else fit_temperature:
            self.temperature_step_.fit(logits, y)
        self.temperature_step_.checked_on(len(y))      # the bound the later steps fit under (decisions.earned)
        self.thresholds_step_.fit(self.temperature_step_.apply(logits), y)
        if self.out_of_scope is not None:
            self.notes_.extend(self.reject_step_.tune(self, Settings.of(self), logits, y, texts, oos_texts))

    def calibrate(self, X, y) -> "TextClassifier":
        """Fit the temperature that predict_proba uses (and, for multi-label data, the decision thresholds; with
        out_of_scope, the reject threshold) on labelled texts held out from training. fit() does this on its
        validation data."""
        self.check_fitted()
        data, outside = self.reject_step_.set_apart(self.target_.read(X, y, "calibration data"), self.out_of_scope)
        check_known(self.target_, data.labels, self.labels_, "calibration")
        self.notes_.extend(self.reject_step_.check_data(Settings.of(self), self.labels_, data, outside))
        self._calibrate(self.decision_function(data.texts), self.target_.encode(data.labels, self.labels_),
                        fit_temperature=True, oos_texts=outside, texts=data.texts)
        return self

    # ---- inference ---------------------------------------------------------------------------------
    def check_fitted(self) -> None:
        """Raise HeadswapError when there is nothing to predict with yet."""
        if not hasattr(self, "module_"):
            raise HeadswapError("this TextClassifier is not fitted yet: call fit() or TextClassifier.load()")

    def _item_logits(self, texts, features: bool = False) -> tuple[list, np.ndarray]:
        """The encoded items of `texts` (windows when chunking) and their logits (and features), on any runtime."""
        items = self.encoder_.encode(texts)
        self.encoder_.report_truncation(len(texts))
        self.module_.start_predict()
        run = self.module_.logits_and_features if features else self.module_.logits
        return items, run(items, self.encoder_.collate, self.eval_batch_size, self.progress)

    def decision_function(self, X) -> np.ndarray:
        """Raw (N, K) class logits, one row per text in input order (a chunked text's windows aggregated)."""
        self.check_fitted()
        items, logits = self._item_logits(from_lists(X, None, "prediction input").texts)
        return per_text(logits, items, self.chunk_aggregate_)

    def logits_and_features(self, X, features: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """((N, K) logits, (N, D) pooled features or None) of texts X from one pass of the model, a chunked text's
        windows aggregated (logits as decision_function does, features by their mean). Features only when asked
        for and the strategy has them."""
        self.check_fitted()
        texts = from_lists(X, None, "prediction input").texts
        if not (features and self.strategy_.pooled_features):
            return self.decision_function(texts), None
        items, (logits, feats) = self._item_logits(texts, features=True)
        return per_text(logits, items, self.chunk_aggregate_), per_text(feats, items, "mean")

    def predict_scored(self, X) -> tuple[np.ndarray, np.ndarray | None]:
        """(predict_proba's (N, K) probabilities, each text's out-of-scope score or None): what decide() needs when
        the model rejects by a score other than softmax; None for softmax (the probabilities are enough)."""
        self.check_fitted()
        if self.out_of_scope is None:
            return self.predict_proba(X), None
        return self.reject_step_.scored(self, X)

    def predict_proba(self, X) -> np.ndarray:
        """(N, K) probabilities: softmax of the logits divided by the fitted temperature, if any; for multi-label
        data each label's own sigmoid (with its own temperature)."""
        logits = self.decision_function(X)     # first: an unfitted classifier says so
        return self.temperature_step_.apply(logits).astype(np.float32)

    def predict(self, X):
        """The class of each text (an array like classes_; out_of_scope where the model rejects the text); for
        multi-label data, a list with a tuple of labels per text (possibly empty: no label reached its
        threshold)."""
        self.check_fitted()   # before classes_ is read
        if self.out_of_scope is not None:
            return self.decide(*self.predict_scored(X))
        return self.decide(self.temperature_step_.apply(self.decision_function(X)))

    def decide(self, probs: np.ndarray, oos_score=None):
        """From predict_proba's output, the decisions predict() makes: for multi-label models a tuple per text
        of the labels whose probability reaches their threshold; with out_of_scope, that label for the texts
        the reject option turns away (a model that rejects by another score than softmax also needs each text's
        score: predict_scored gives both)."""
        out = self.thresholds_step_.decide(self.balance_step_.adjust(probs), self.classes_)
        if self.out_of_scope is None:
            return out
        value = self.reject_step_.value(self.classes_, self.out_of_scope)   # what predict answers for a rejected text
        return self.reject_step_.decide(out, probs, oos_score, value)

    def suggest(self, X, n: int, exclude=None, strategy: str = "margin-kmeans", seed: int = 0):
        """The n texts of X worth labelling next, never one of `exclude` nor a text twice
        (headswap.classifier.suggest)."""
        from headswap.classifier.suggest import suggest
        return suggest(self, X, n, exclude, strategy, seed)

    def explain(self, X, **kwargs):
        """Why each text got its label, a score per word: headswap.explain.explain (label, method, steps)."""
        from headswap.explain import explain
        return explain(self, X, **kwargs)

    def score(self, X, y, sample_weight=None) -> float:
        """Accuracy; subset accuracy (every label right) for multi-label data."""
        if not self.multi_label:
            return super().score(X, y, sample_weight)
        truth, pred = self.target_.truth(y), self.predict(X)
        return float(np.mean([set(a) == set(b) for a, b in zip(truth, pred)]))

    def evaluate(self, X, y) -> Metrics:
        """Metrics on labelled texts; extra holds timing, throughput, parameter counts and calibration."""
        self.check_fitted()
        target, labels = self.target_, list(self.labels_)
        data, oos_texts = self.reject_step_.set_apart(target.read(X, y, "evaluation data"), self.out_of_scope)
        check_known(target, data.labels, labels, "evaluation")
        oos_texts = oos_texts or []
        t0 = time.perf_counter()
        all_logits, feats = self.logits_and_features(data.texts + oos_texts, features=self.out_of_scope is not None
                                                     and self.oos_statistics_ is not None)
        seconds = time.perf_counter() - t0
        logits, y_in = all_logits[: len(data)], target.encode(data.labels, labels)
        m, cal = target.metrics(logits, y_in, labels, self.positive_label, self.temperature_step_, self.thresholds_,
                                self.balance_step_)
        n = len(data) + len(oos_texts)
        m.extra.update(self.summary(), eval_seconds=seconds, texts_per_second=n / seconds if seconds else 0.0)
        m.extra["calibration"] = cal
        if self.out_of_scope is not None:
            m.extra["out_of_scope"] = self.reject_step_.block(self.temperature_step_.apply(all_logits), all_logits,
                                                              feats, y_in, len(oos_texts), self.out_of_scope)
        m.extra.update(self.strategy_.extra_metrics(self.module_, len(labels)))
        return m

    def summary(self) -> dict:
        self.check_fitted()
        return {"strategy": self.strategy, "model": self.model, "regime": self.regime_,
                **(self.param_counts_ or self.count_params()), "runtime": self.runtime_,
                "train_seconds": self.train_seconds_}

    def count_params(self) -> dict:
        """{trainable_params, total_params} of the module as it is now."""
        return {"trainable_params": count_parameters(self.module_) if self.epochs else 0,
                "total_params": count_parameters(self.module_, trainable_only=False)}

    # ---- save / load (headswap.classifier.persist) --------------------------------------------------------------
    def save(self, path) -> Path:
        """Write the classifier into the model directory `path` (headswap.saved.model_dir); returns it."""
        return persist.save(self, Path(path))

    @classmethod
    def load(cls, path, progress: bool | None = None, runtime: str = "auto") -> "TextClassifier":
        """A saved classifier. runtime (headswap.classifier.runtime.RUNTIMES): auto runs an exported directory's ONNX
        graph and any other on torch; torch-int8 quantizes the Linear layers at load."""
        return persist.load(cls, Path(path), progress, runtime)


def load_model(path, progress: bool | None = None, runtime: str = "auto"):
    """Whatever a model directory holds: a TextClassifier (on `runtime`), a TfidfClassifier, a Blend of both."""
    from headswap.baseline import blend, tfidf
    if (kind := model_dir.read_config(Path(path)).get("kind")) == blend.KIND:
        return blend.Blend.load(path, lambda p: TextClassifier.load(p, progress=progress, runtime=runtime))
    if kind == tfidf.KIND:
        if runtime != "auto":
            raise HeadswapError(f"{path} holds a TF-IDF model, which runs on scikit-learn; --runtime {runtime} "
                                f"does not apply")
        return tfidf.TfidfClassifier.load(path)
    return TextClassifier.load(path, progress=progress, runtime=runtime)
