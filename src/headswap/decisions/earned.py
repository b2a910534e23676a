"""The certainty a model has earned: probabilities kept off 0 and 1 by the number of texts that checked them.

A model that was right on all n validation texts it was checked on has shown no more than that the next text is
right with probability (n + 1) / (n + 2) (Laplace's rule of succession); temperature scaling on such texts can still
reach [1e-32, 1.0]. So after calibration no probability is above 1 - eps, eps = 1 / (n + 2): each of K classes
keeps at least eps / (K - 1), and a row with a smaller one is mixed with the uniform distribution just enough to
lift it there. The mix keeps each row's sum and never puts a class ahead of one it was behind (the argmax, so every
prediction, stays), and leaves rows already inside untouched. A multi-label model's probabilities, one per label,
are each kept within [eps, 1 - eps]. n and eps are saved in the model's config (KEY), so a reloaded model gives the
same numbers; a model checked on no texts (fitted without validation data) is not clipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KEY = "earned_confidence"      # its key in headswap_config.json


@dataclass(frozen=True)
class Earned:
    texts: int      # the validation texts the probabilities were checked on
    eps: float      # no probability above 1 - eps

    @classmethod
    def checked_on(cls, n: int) -> "Earned | None":
        """The bound for a model checked on n texts (None for none)."""
        n = int(n)
        return cls(n, 1.0 / (n + 2)) if n > 0 else None

    def clip(self, probs, multi_label: bool = False) -> np.ndarray:
        """(N, K) probabilities within the bound, float64 (see the module's docstring)."""
        p = np.asarray(probs, dtype=np.float64)
        if multi_label:
            return np.clip(p, self.eps, 1.0 - self.eps)
        k = p.shape[-1]
        if k < 2:
            return p
        floor, uniform = self.eps / (k - 1), 1.0 / k
        least = p.min(axis=-1, keepdims=True)
        # the share of the uniform row that lifts the least class to the floor: 0 where it is there, below 1 as
        # floor < 1/K (n >= 1), so no class passes another
        share = np.clip(floor - least, 0.0, None) / np.maximum(uniform - least, np.finfo(np.float64).tiny)
        if not share.any():
            return p
        # clipped too: the mix lands on the bounds only to within rounding (0.8750000000000001 for 7/8)
        return np.clip((1.0 - share) * p + share * uniform, floor, 1.0 - self.eps)

    def config(self) -> dict:
        return {KEY: {"validation_texts": self.texts, "eps": self.eps}}

    @classmethod
    def load(cls, config: dict) -> "Earned | None":
        """From a saved config (None where it has none: saved before the bound, or checked on no texts)."""
        saved = config.get(KEY)
        if saved is None:
            return None
        from headswap.errors import HeadswapError
        texts, eps = (saved.get(k) if isinstance(saved, dict) else None for k in ("validation_texts", "eps"))
        if (not isinstance(texts, int) or isinstance(texts, bool) or texts < 1 or not isinstance(eps, float)
                or not 0.0 < eps <= 0.5):
            raise HeadswapError(f"{KEY} must be {{\"validation_texts\": an integer >= 1, \"eps\": a number in "
                                f"(0, 0.5]}}, got {saved!r:.80}; the model's headswap_config.json is damaged")
        return cls(texts, eps)


def of(model) -> Earned | None:
    """A fitted classifier's bound: a TextClassifier's temperature step holds it, a TfidfClassifier its earned_."""
    step = getattr(model, "temperature_step_", None)
    return getattr(step, "earned", None) if step is not None else getattr(model, "earned_", None)
