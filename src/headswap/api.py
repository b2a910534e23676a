"""TextClassifier: one scikit-learn style estimator for every strategy, regime and model.

    clf = TextClassifier(strategy="slm-logits", model="smollm2-135m", regime="lora", epochs=1)
    clf.fit(texts, labels)
    clf.predict_proba(["free entry! txt WIN"])
    clf.save("out/spam"); TextClassifier.load("out/spam")
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from sklearn.base import BaseEstimator, ClassifierMixin

from . import __version__
from .classifier import Classifier
from .data import LabelledData, from_lists, stratified_split
from .encoding import TextEncoder, pad_id_of
from .errors import ConfigError, HeadswapError
from .heads import make_head
from .heads_slm import CosineHead, SlicedLMHead
from .hf import HFBody, base_of, strip_bert_pooler
from .lora import LoraSettings, apply_lora
from .metrics import Metrics, metrics_from_logits
from .pooling import make_pool
from .prefix_cache import PrefixCachedBody, supports_prefix_cache
from .prompts import answer_token_ids, build_prompt
from .regimes import REGIMES, apply_regime, count_parameters
from .strategies import (DEFAULT_REGIME, NEEDS_CAUSAL, PROMPTED, STRATEGIES, ZERO_SHOT, CrossEncoderClassifier,
                         GenerateParseClassifier, HeadOnFeatures, SimilarityClassifier, collate_features,
                         supports_feature_cache)
from .training import TrainConfig, fit, predict_logits

log = logging.getLogger(__name__)
CONFIG_FILE, WEIGHTS_FILE, CARD_FILE = "headswap_config.json", "model.safetensors", "README.md"
FORMAT_VERSION = 1


class TextClassifier(ClassifierMixin, BaseEstimator):
    """Train, use, save and reload a text classifier built from a small pretrained model.

    strategy: one of headswap.strategies.STRATEGIES. regime: head-only | partial | full | lora | auto
    (auto: full for encoders, lora for causal LMs). epochs=0 runs a zero-shot strategy untrained.
    checkpoint_dir: write a checkpoint there after every epoch (atomically, see headswap.checkpoint);
    resume=True continues from it when it holds a complete one (same data and settings).
    """

    def __init__(self, strategy: str = "encoder-mlp", model: str = "minilm", regime: str = "auto",
                 pooling: str = "auto", head: str = "mlp", epochs: int = 3, batch_size: int = 16,
                 head_lr: float = 1e-3, body_lr: float | None = None, schedule: str = "linear",
                 warmup_ratio: float = 0.06, weight_decay: float = 0.01, max_grad_norm: float = 1.0,
                 last_n: int = 1, lora_r: int = 16, lora_alpha: int = 32, lora_dropout: float = 0.05,
                 max_length: int = 128, instruction: str | None = None, descriptions: dict | None = None,
                 metric: str = "macro_f1", eval_fraction: float = 0.1, seed: int = 0, progress: bool = True,
                 eval_batch_size: int = 32, positive_label: str | None = "auto",
                 checkpoint_dir: str | None = None, resume: bool = False, prefix_cache: bool = True):
        self.strategy = strategy
        self.model = model
        self.regime = regime
        self.pooling = pooling
        self.head = head
        self.epochs = epochs
        self.batch_size = batch_size
        self.head_lr = head_lr
        self.body_lr = body_lr
        self.schedule = schedule
        self.warmup_ratio = warmup_ratio
        self.weight_decay = weight_decay
        self.max_grad_norm = max_grad_norm
        self.last_n = last_n
        self.lora_r = lora_r
        self.lora_alpha = lora_alpha
        self.lora_dropout = lora_dropout
        self.max_length = max_length
        self.instruction = instruction
        self.descriptions = descriptions
        self.metric = metric
        self.eval_fraction = eval_fraction
        self.seed = seed
        self.progress = progress
        self.eval_batch_size = eval_batch_size
        self.positive_label = positive_label
        self.checkpoint_dir = checkpoint_dir
        self.resume = resume
        self.prefix_cache = prefix_cache

    # ---- resolved settings -------------------------------------------------------------------------
    def _check_settings(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown strategy {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if self.regime != "auto" and self.regime not in REGIMES:
            raise ConfigError(f"unknown regime {self.regime!r}; choose one of auto, {', '.join(REGIMES)}")
        if self.epochs < 0:
            raise ConfigError(f"epochs must be >= 0, got {self.epochs}")
        if self.epochs == 0 and self.strategy not in ZERO_SHOT:
            raise ConfigError(f"strategy {self.strategy!r} starts with an untrained head and cannot run "
                              f"zero-shot (epochs=0); zero-shot strategies: {', '.join(ZERO_SHOT)}")
        if self.regime_ == "head-only" and self.strategy == "generate-parse":
            raise ConfigError("generate-parse has no separate head to train; use regime lora, partial or full")

    @property
    def regime_(self) -> str:
        return DEFAULT_REGIME[self.strategy] if self.regime == "auto" else self.regime

    def _pooling_for(self, causal: bool) -> str:
        if self.pooling != "auto":
            return self.pooling
        return "last" if causal else "mean"

    def _body_lr(self) -> float:
        if self.body_lr is not None:
            return self.body_lr
        return 2e-4 if self.regime_ == "lora" else 3e-5

    # ---- building the module -----------------------------------------------------------------------
    def _build(self, labels: list[str], descriptions: dict[str, str], weights: dict | None = None) -> None:
        from .models import load_model, resolve_model

        strategy = self.strategy
        causal_needed = strategy in NEEDS_CAUSAL
        keep_lm_head = strategy in ("slm-logits", "slm-letters", "generate-parse")
        spec = resolve_model(self.model)
        if causal_needed and spec.kind != "causal":
            raise ConfigError(f"strategy {strategy!r} needs a causal language model; {self.model!r} is an "
                              f"{spec.kind}. Use e.g. model='smollm2-135m'")
        from transformers.utils import logging as hf_logging
        if not self.progress:
            hf_logging.disable_progress_bar()
        try:
            hf_model, tokenizer, spec = load_model(spec, causal_lm_head=keep_lm_head)
        finally:
            hf_logging.enable_progress_bar()
        causal = spec.kind == "causal"
        self.model_spec_ = spec
        self.tokenizer_ = tokenizer
        hidden = hf_model.config.hidden_size
        k = len(labels)
        prompt = None
        if strategy in PROMPTED:
            prompt = build_prompt(tokenizer, labels, descriptions, self.instruction,
                                  letters=strategy == "slm-letters")
            # The shared prompt prefix runs once (a KV cache) instead of once per text; generate-parse
            # keeps whole prompts, since generation manages its own cache.
            cached = self.prefix_cache and strategy != "generate-parse" and supports_prefix_cache(hf_model)
            encoder = TextEncoder(tokenizer, "prompt", self.max_length, prompt=prompt, include_prefix=not cached)
        elif strategy == "cross-encoder":
            encoder = TextEncoder(tokenizer, "pair", self.max_length, pair_texts=[descriptions[lab] for lab in labels],
                                  pair_token_types=getattr(hf_model.config, "type_vocab_size", 1) > 1)
        else:
            prefix = f"Instruct: {self.instruction}\nQuery: " if (self.instruction and strategy != "similarity") else ""
            encoder = TextEncoder(tokenizer, "plain", self.max_length, prefix=prefix, append_eos=causal)
        self.prompt_ = prompt
        self.encoder_ = encoder

        if strategy == "generate-parse":
            module = GenerateParseClassifier(hf_model, tokenizer, prompt.answers, prompt.answer_separator,
                                             pad_id_of(tokenizer))
        elif strategy in ("slm-logits", "slm-letters"):
            ids = answer_token_ids(tokenizer, prompt, labels)
            head = SlicedLMHead.from_model(hf_model, ids)
            self.answer_token_ids_ = ids
            module = Classifier(self._prompted_body(hf_model), hidden, k, pooling="last", head=head)
            del hf_model  # the vocab x hidden LM head is not used again (tied weights stay as embeddings)
        else:
            base = base_of(hf_model) if causal and hasattr(hf_model, "lm_head") else hf_model
            body = self._prompted_body(hf_model) if strategy == "slm-hidden-mlp" else HFBody(strip_bert_pooler(base))
            pool = make_pool(self._pooling_for(causal), hidden)
            if strategy == "similarity":
                use_protos = self.regime_ == "head-only" or self.epochs == 0
                desc = encoder.collate(TextEncoder(tokenizer, "plain", self.max_length, append_eos=causal)
                                       .encode([descriptions[lab] for lab in labels]))
                with torch.inference_mode():
                    protos = pool(body(desc["input_ids"], desc["attention_mask"]), desc["attention_mask"])
                module = SimilarityClassifier(body, pool, CosineHead(protos.clone()), desc, use_protos)
            elif strategy == "cross-encoder":
                module = CrossEncoderClassifier(body, pool, hidden, k)
            else:
                module = Classifier(body, hidden, k, pooling=pool, head=make_head(self.head, hidden, k))
        module.eval()
        self._apply_regime(module)
        if weights is not None:
            self._load_weights(module, weights)
        self.module_ = module

    def _prompted_body(self, hf_model) -> HFBody:
        body = HFBody(base_of(hf_model) if hasattr(hf_model, "lm_head") else hf_model)
        if self.encoder_.mode == "prompt" and not self.encoder_.include_prefix:
            return PrefixCachedBody(body, self.encoder_.prefix_ids)
        return body

    def _apply_regime(self, module) -> None:
        regime = self.regime_
        self.lora_ = None
        if self.epochs == 0:  # zero-shot: nothing trains, so no adapters to slow inference down
            for p in module.parameters():
                p.requires_grad_(False)
            return
        if regime == "lora":
            self.lora_ = LoraSettings(self.lora_r, self.lora_alpha, self.lora_dropout)
            apply_lora(module, self.lora_)
        else:
            apply_regime(module, regime, last_n=self.last_n)
        # The sliced LM head is pretrained: it is the head that head-only trains, and otherwise stays
        # frozen so that training changes the representation, not the decision layer.
        if self.strategy in ("slm-logits", "slm-letters") and regime != "head-only":
            for p in module.head.parameters():
                p.requires_grad_(False)
        if self.strategy == "similarity" and not module.use_prototypes:
            module.head.prototypes.requires_grad_(False)

    # ---- training ----------------------------------------------------------------------------------
    def _train_config(self) -> TrainConfig:
        return TrainConfig(epochs=max(self.epochs, 1), batch_size=self.batch_size,
                           eval_batch_size=self.eval_batch_size, head_lr=self.head_lr, body_lr=self._body_lr(),
                           weight_decay=self.weight_decay, schedule=self.schedule, warmup_ratio=self.warmup_ratio,
                           max_grad_norm=self.max_grad_norm, seed=self.seed, metric=self.metric,
                           progress=self.progress,
                           checkpoint_dir=str(self.checkpoint_dir) if self.checkpoint_dir else None,
                           resume=self.resume)

    def fit(self, X, y, eval_texts=None, eval_labels=None, descriptions=None):
        """Train on texts X with labels y; validation data (given, or eval_fraction of X) picks the best epoch."""
        self._check_settings()
        y_list = None if isinstance(X, LabelledData) else list(y)
        train = X if y_list is None else from_lists(list(X), [str(v) for v in y_list], "training data")
        # Labels are strings inside (prompts, descriptions, saved config); classes_ keeps the caller's
        # integer labels as integers, so that predict() output compares equal to y (sklearn's score).
        numeric = bool(y_list) and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in y_list)
        labels = sorted(set(train.labels), key=int if numeric else None)
        if len(labels) < 2:
            raise HeadswapError(f"training data has a single class {labels[0]!r}; a classifier needs at least two")
        self.labels_ = labels
        self.classes_ = np.array([int(s) for s in labels]) if numeric else np.array(labels, dtype=object)
        desc_spec = descriptions if descriptions is not None else self.descriptions
        from .data import load_descriptions
        self.descriptions_ = load_descriptions(desc_spec, labels)
        if eval_texts is not None:
            val = from_lists(list(eval_texts), [str(v) for v in eval_labels], "evaluation data")
        elif self.eval_fraction and self.epochs > 0 and len(train) >= 20:
            train, val = stratified_split(train, self.eval_fraction, self.seed)
        else:
            val = None
        if val is not None:
            unseen = sorted(set(val.labels) - set(labels))
            if unseen:
                raise HeadswapError(f"evaluation labels never seen in training: {unseen}; known: {labels}")
        torch.manual_seed(self.seed)
        t0 = time.perf_counter()
        self._build(labels, self.descriptions_)
        self.build_seconds_ = time.perf_counter() - t0
        self.history_, self.train_seconds_, self.notes_ = [], 0.0, []
        if self.epochs == 0:
            self.trainable_params_ = 0
            return self
        index = {lab: i for i, lab in enumerate(labels)}
        y_train = [index[v] for v in train.labels]
        train_items = self.encoder_.encode(train.texts, y_train)
        note = self.encoder_.report_truncation(len(train), "training texts")
        if note:
            self.notes_.append(note)
        val_items = self.encoder_.encode(val.texts, [index[v] for v in val.labels]) if val is not None else None
        y_val = [index[v] for v in val.labels] if val is not None else None
        cfg = self._train_config()
        module, collate = self.module_, self.encoder_.collate
        t0 = time.perf_counter()
        if self.regime_ == "head-only" and supports_feature_cache(module):
            # The frozen body gives each text the same features every epoch: compute them once. They are
            # recomputed (identically) on resume; the checkpoint holds the head alone.
            train_items = self._feature_items(train_items, y_train, "caching training features")
            val_items = self._feature_items(val_items, y_val, "caching validation features") if val_items else None
            module, collate = HeadOnFeatures(self.module_.head), collate_features
        result = fit(module, train_items, collate, cfg, eval_items=val_items, eval_labels=y_val,
                     label_names=labels, positive_label=self.positive_label, log=log.info if not self.progress else _tqdm_write)
        self.train_seconds_ = time.perf_counter() - t0
        self.history_ = [vars(h) for h in result.history]
        self.best_epoch_ = result.best_epoch
        self.trainable_params_ = count_parameters(self.module_)
        self.module_.eval()
        return self

    def _feature_items(self, items, labels, desc):
        feats = self._features(items, desc)
        return [{"features": f, "label": y} for f, y in zip(feats, labels)]

    @torch.inference_mode()
    def _features(self, items, desc="features") -> torch.Tensor:
        from torch.utils.data import DataLoader
        from tqdm.auto import tqdm

        self.module_.eval()
        out = []
        loader = DataLoader(items, batch_size=self.eval_batch_size, collate_fn=self.encoder_.collate)
        for batch in tqdm(loader, desc=desc, disable=not self.progress, leave=False):
            batch.pop("labels", None)
            out.append(self.module_.features(**batch))
        return torch.cat(out)

    # ---- inference ---------------------------------------------------------------------------------
    def _check_fitted(self):
        if not hasattr(self, "module_"):
            raise HeadswapError("this TextClassifier is not fitted yet: call fit() or TextClassifier.load()")

    def decision_function(self, X) -> np.ndarray:
        """Raw (N, K) class logits."""
        self._check_fitted()
        texts = from_lists(list(X), None, "prediction input").texts
        items = self.encoder_.encode(texts)
        self.encoder_.report_truncation(len(texts))
        if hasattr(self.module_, "parse_counts"):
            self.module_.parse_counts.clear()   # count this call's texts only
        logits = predict_logits(self.module_, items, self.encoder_.collate, self.eval_batch_size,
                                progress=self.progress, desc="predict")
        return logits.numpy()

    def predict_proba(self, X) -> np.ndarray:
        return torch.softmax(torch.from_numpy(self.decision_function(X)), -1).numpy()

    def predict(self, X) -> np.ndarray:
        logits = self.decision_function(X)   # checks fitted before classes_ is read
        return self.classes_[logits.argmax(axis=1)]

    def evaluate(self, X, y) -> Metrics:
        """Metrics on labelled texts; extra holds timing, throughput and parameter counts."""
        self._check_fitted()
        labels = list(self.labels_)
        data = from_lists(list(X), [str(v) for v in y], "evaluation data")
        unseen = sorted(set(data.labels) - set(labels))
        if unseen:
            raise HeadswapError(f"evaluation labels never seen in training: {unseen}; known: {labels}")
        t0 = time.perf_counter()
        logits = self.decision_function(data.texts)
        seconds = time.perf_counter() - t0
        index = {lab: i for i, lab in enumerate(labels)}
        m = metrics_from_logits(torch.from_numpy(logits), [index[v] for v in data.labels], labels,
                                self.positive_label)
        m.extra.update(self.summary(), eval_seconds=seconds, texts_per_second=len(data) / seconds if seconds else 0.0)
        if self.strategy == "generate-parse":
            m.extra["parse_counts"] = dict(self.module_.parse_counts)
        if self.strategy == "cross-encoder":
            m.extra["forward_passes_per_text"] = len(labels)
        return m

    def summary(self) -> dict:
        self._check_fitted()
        return {"strategy": self.strategy, "model": self.model, "regime": self.regime_,
                "trainable_params": count_parameters(self.module_) if self.epochs else 0,
                "total_params": count_parameters(self.module_, trainable_only=False),
                "train_seconds": getattr(self, "train_seconds_", 0.0)}

    # ---- save / load -------------------------------------------------------------------------------
    def _trained_state(self) -> dict[str, torch.Tensor]:
        """What training changed: every trainable parameter (LoRA adapters, head, trained blocks), plus
        the similarity prototypes and the sliced head, which are derived from the base at build time."""
        state, seen = {}, set()
        for name, p in self.module_.named_parameters():
            keep = p.requires_grad or name.startswith("head.")
            if keep and p.data_ptr() not in seen:
                seen.add(p.data_ptr())
                state[name] = p.detach().contiguous().clone()
        return state

    def _load_weights(self, module, weights: dict) -> None:
        missing, unexpected = module.load_state_dict(weights, strict=False)
        if unexpected:
            raise HeadswapError(f"saved weights do not fit this model: unexpected {unexpected[:5]}")

    def save(self, path) -> Path:
        from .model_card import write_model_card
        from .models import model_reference_for_config

        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        config = {"format": "headswap", "format_version": FORMAT_VERSION, "headswap_version": __version__,
                  "params": self.get_params(), "labels": list(self.labels_),
                  "label_values": self.classes_.tolist(), "descriptions": self.descriptions_,
                  "base_model": model_reference_for_config(self.model_spec_), "regime": self.regime_,
                  "prompt": vars(self.prompt_) if self.prompt_ else None,
                  "answer_token_ids": getattr(self, "answer_token_ids_", None),
                  "lora": self.lora_.to_dict() if self.lora_ else None,
                  "history": self.history_, "train_seconds": self.train_seconds_,
                  "evaluation": getattr(self, "evaluation_", None)}
        tmp = path / (WEIGHTS_FILE + ".tmp")
        save_file(self._trained_state(), str(tmp), metadata={"format": "pt"})
        tmp.replace(path / WEIGHTS_FILE)
        (path / CONFIG_FILE).write_text(json.dumps(config, indent=2, default=str))
        write_model_card(path / CARD_FILE, config, self.summary())
        return path

    @classmethod
    def load(cls, path, progress: bool | None = None) -> "TextClassifier":
        path = Path(path)
        cfg_file = path / CONFIG_FILE
        if not cfg_file.is_file():
            raise HeadswapError(f"{path} is not a saved headswap model: {CONFIG_FILE} is missing")
        try:
            config = json.loads(cfg_file.read_text())
        except json.JSONDecodeError as e:
            raise HeadswapError(f"{cfg_file} is corrupt: {e}") from None
        if config.get("format") != "headswap" or config.get("format_version") != FORMAT_VERSION:
            raise HeadswapError(f"{path} was saved by an incompatible headswap version "
                                f"(format {config.get('format_version')!r}, this version reads {FORMAT_VERSION})")
        params = dict(config["params"])
        base = config.get("base_model") or {}
        if base.get("ref") and not base.get("builtin"):
            params["model"] = base["ref"]   # absolute: resolves from any working directory
        if progress is not None:
            params["progress"] = progress
        # A reloaded model does not continue its training run: refitting it starts afresh.
        params["checkpoint_dir"], params["resume"] = None, False
        clf = cls(**params)
        try:
            weights = load_file(str(path / WEIGHTS_FILE))
        except Exception as e:  # safetensors raises its own error types for truncated files
            raise HeadswapError(f"{path / WEIGHTS_FILE} cannot be read ({e}); the model directory is corrupt") from None
        clf.labels_ = list(config["labels"])
        values = config.get("label_values") or clf.labels_
        clf.classes_ = np.array(values) if all(isinstance(v, int) for v in values) else np.array(values, dtype=object)
        clf.descriptions_ = config["descriptions"]
        torch.manual_seed(clf.seed)
        clf._build(clf.labels_, clf.descriptions_, weights=weights)
        clf.history_, clf.train_seconds_, clf.notes_ = config.get("history", []), config.get("train_seconds", 0.0), []
        clf.evaluation_ = config.get("evaluation")
        return clf


def _tqdm_write(msg: str) -> None:
    from tqdm.auto import tqdm
    tqdm.write(msg)
