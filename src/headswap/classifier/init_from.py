"""Training on from a shipped model (`fit(..., init_from=...)`, `headswap train --init-from DIR`).

The parent's settings are the run's defaults, its trained weights the start and its classes come first: classes
only the new data has are appended, and the head grows a fresh row for each (for slm-logits, the new class's
first-token row of the LM head, as a fresh build slices it). The saved model records its parent's path and
fingerprint. A TF-IDF or blended parent, a parent that saved no trained weights (zero-shot), or a static one
(its vocabulary comes from its own training texts) is refused, as is a setting that contradicts the parent's body.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from headswap.saved import model_dir

from headswap import settings
from headswap.errors import ConfigError, HeadswapError

# What decides the body, its trained tensors and what a logit means: a run must share them with its parent.
BODY = ("strategy", "model", "regime", "pooling", "head", "last_n", "lora_r", "lora_alpha", "instruction",
        "prompt_language", "multi_label", "train_embeddings")
# Taken from the parent too when left at their default, but a run may change them.
ADOPTED = BODY + ("max_length", "chunk_stride", "label_separator")
# Settings of this run alone, never taken from the parent.
OWN = ("progress", "checkpoint_dir", "resume", "descriptions", "class_weight")


class Parent:
    """A trained model to train on from: its settings, class names and (read when needed) its trained weights."""

    def __init__(self, name: str, config: dict, path: Path | None = None, weights: dict | None = None):
        self.name, self.config, self.path, self._weights = name, config, path, weights
        self.params = dict(config["params"])
        base = config.get("base_model") or {}
        if base.get("ref") and not base.get("builtin"):
            self.params["model"] = base["ref"]     # absolute: resolves from any working directory
        if self.params.get("prompt_language") == "auto" and config.get("prompt_language"):
            self.params["prompt_language"] = config["prompt_language"]    # the language its prompt was built in
        self.params["regime"] = config.get("regime") or self.params["regime"]
        self.labels = list(config["labels"])
        self.values = list(config.get("label_values") or self.labels)

    @classmethod
    def of(cls, source) -> "Parent":
        """A Parent from a model directory's path, a fitted TextClassifier, or a Parent (returned as is)."""
        if isinstance(source, Parent):
            return source
        if isinstance(source, (str, Path)):
            return cls.read(Path(source))
        if hasattr(source, "module_") and hasattr(source, "fitted_"):
            return cls._of_classifier(source)
        raise HeadswapError(f"init_from must be a saved model's directory or a fitted TextClassifier, "
                            f"got {type(source).__name__}")

    @classmethod
    def adopted_by(cls, clf, source, soft_labels=None) -> "Parent":
        """fit's init_from: the parent of `source`, its body settings given to `clf` (Parent.adopt)."""
        if soft_labels is not None:
            raise HeadswapError("init_from trains on labelled texts; soft_labels are not supported with it")
        parent = cls.of(source)
        parent.adopt(clf)
        return parent

    @classmethod
    def read(cls, path: Path, data: str | None = None) -> "Parent":
        """The model directory `path` as a parent (its settings checked; weights read later). data: the new
        training data's path, which a refusal's command to run instead names."""
        import shlex

        from headswap.baseline import blend, tfidf
        config = model_dir.read_config(path)
        kind = config.get("kind")
        data = shlex.quote(str(data)) if data else "ALL.csv"
        if kind in (tfidf.KIND, blend.KIND):
            raise HeadswapError(f"--init-from {path} holds a {'TF-IDF' if kind == tfidf.KIND else 'blended'} model, "
                                f"which has no weights to train on; fit one anew on all the data instead (TF-IDF "
                                f"takes seconds): headswap auto --data {data} --budget 1m --out NEW")
        model_dir.check_config(path, config)
        if (strategy := config["params"].get("strategy")) == "static":
            model = shlex.quote(str(config["params"].get("model")))
            raise HeadswapError(f"--init-from {path} is a static model, whose vocabulary comes from its own "
                                f"training texts; train it anew on all the data instead: headswap train --data {data} "
                                f"--strategy {strategy} --model {model} --out NEW")
        return cls(str(path), config, path=path)

    @classmethod
    def _of_classifier(cls, clf) -> "Parent":
        clf.check_fitted()
        if not clf.module_.saves_torch_weights:
            raise HeadswapError(f"init_from: this classifier runs on {clf.runtime_}; load it with runtime='torch'")
        if clf.strategy == "static":
            raise HeadswapError("init_from: a static model's vocabulary comes from its own training texts; "
                                "train it anew on all the data")
        config = {"params": clf.get_params(), "regime": clf.regime_, **clf.fitted_.labels_config(),
                  "prompt_language": (clf.saved_ or {}).get("prompt_language")}
        return cls("a fitted TextClassifier", config, weights=model_dir.trained_state(clf.module_))

    # ---- settings ------------------------------------------------------------------------------------------
    def check_given(self, name: str, value, flag: str | None = None) -> None:
        """Refuse `value` for the body setting `name` when it is not the parent's."""
        mine = self.params.get(name)
        if name == "model" and _same_model(value, mine):
            return
        if name == "regime" and value == "auto":
            from headswap.strategies import get
            value = get(self.params["strategy"]).default_regime
        if name in BODY and value != mine:
            raise ConfigError(f"{flag or name} {value!r} contradicts --init-from {self.name}, which has {name} "
                              f"{mine!r}: training on from a model keeps its body; leave {flag or name} out")

    def adopt(self, clf) -> None:
        """Give `clf` the parent's body settings where it left them at their default; refuse one that differs."""
        defaults = settings.defaults()
        for name in ADOPTED:
            value = getattr(clf, name)
            if value == defaults[name] and name in self.params:
                setattr(clf, name, self.params[name])
            else:
                self.check_given(name, value)

    def inherit_args(self, args, given) -> None:
        """Command-line settings: each one not on the command line (given(args, name) false) takes the parent's
        value; a body setting given with another value is refused."""
        for f in settings.all_fields():
            name = f.name
            if not f.metadata["cli"] or name in OWN or name not in self.params or not hasattr(args, name):
                continue
            if given(args, name):
                self.check_given(name, getattr(args, name), settings.flag_of(f))
            else:
                setattr(args, name, self.params[name])

    # ---- classes and weights -----------------------------------------------------------------------------
    def grow(self, labels: list[str], classes) -> tuple[list[str], object]:
        """The parent's class names and values first, then those only the new data has (in its order)."""
        import numpy as np
        new = [(lab, val) for lab, val in zip(labels, list(classes)) if lab not in self.labels]
        values = self.values + [v for _, v in new]
        ints = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values)
        return self.labels + [lab for lab, _ in new], (np.array(values) if ints else np.array(values, dtype=object))

    @property
    def weights(self) -> dict:
        if self._weights is None:
            self._weights = model_dir.read_weights(self.path)
            if not self._weights:
                raise HeadswapError(f"--init-from {self.name} saved no trained weights (strategy "
                                    f"{self.params['strategy']}, epochs {self.params.get('epochs')}): there is "
                                    f"nothing to train on from; train anew")
        return self._weights

    def load_into(self, module) -> None:
        """The parent's trained tensors into `module` (built for the grown classes): a head tensor with one row
        per class keeps the parent's rows first and the fresh build's rows for the new classes."""
        state, n_old = module.state_dict(), len(self.labels)
        expected = model_dir.trained_state(module)
        missing = sorted(set(expected) - set(self.weights))
        if missing:
            raise HeadswapError(f"--init-from {self.name} lacks {len(missing)} of the tensors this model trains "
                                f"(e.g. {missing[:2]}): it was saved with other settings")
        out = {}
        for name, w in self.weights.items():
            cur = state.get(name)
            if cur is None:
                raise HeadswapError(f"--init-from {self.name}: its tensor {name} has no place in this model")
            if tuple(w.shape) == tuple(cur.shape):
                out[name] = w
            elif name.startswith("head.") and w.shape[1:] == cur.shape[1:] and w.shape[0] == n_old < cur.shape[0]:
                grown = cur.detach().clone()
                grown[:n_old] = w
                out[name] = grown
            else:
                raise HeadswapError(f"--init-from {self.name}: its tensor {name} {tuple(w.shape)} does not fit "
                                    f"this model's {tuple(cur.shape)}")
        module.load_state_dict(out, strict=False)

    def record(self, labels: list[str]) -> dict:
        """What the trained model saves about its parent."""
        return {"path": str(self.path.resolve()) if self.path else None, "fingerprint": self.fingerprint(),
                "labels": self.labels, "new_labels": [lab for lab in labels if lab not in self.labels]}

    def fingerprint(self) -> str:
        if self.path is not None:
            return model_dir.fingerprint(self.path)
        h = hashlib.sha256()
        for name in sorted(self.weights):
            h.update(name.encode() + b"\0" + self.weights[name].float().cpu().numpy().tobytes())
        return h.hexdigest()[:16]


def _same_model(a, b) -> bool:
    if a == b:
        return True
    try:
        return Path(a).exists() and Path(b).exists() and Path(a).resolve() == Path(b).resolve()
    except (TypeError, OSError):
        return False
