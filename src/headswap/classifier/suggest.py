"""Which texts to label next: uncertainty, or uncertainty spread over the model's own feature space.

    from headswap import load_model
    clf = load_model("runs/first")
    picks = clf.suggest(unlabelled_texts, 200, exclude=labelled_texts)
    picks.rows[:3]             # [{"rank", "row", "text", "predicted_label", "confidence", "margin", "why"}, ...]
    picks.write("to-label")    # to_label.csv, label_studio.json, label_studio_config.xml, suggest.json

Everything comes from one pass of the model over the pool (TextClassifier.logits_and_features: the logits and the
pooled features the head reads), turned into calibrated probabilities as predict_proba does. Strategies (select()):

* ``margin`` (breaking ties): the texts whose two most probable classes are closest.
* ``entropy``: the texts with the largest prediction entropy.
* ``margin-kmeans`` (default), after Zhdanov's diverse mini-batch active learning (arXiv:1901.05954): the
  PREFILTER x n most uncertain texts by margin, clustered into n groups by k-means on their L2-normalised pooled
  features (weighted by uncertainty), and from each group its most uncertain text: uncertain texts that are not all
  the same kind of text. Without pooled features (a TF-IDF model, a cross-encoder) it is plain margin.
* ``random``: a seeded uniform draw, the baseline.

Duplicated texts count once (their first row), texts in `exclude` are never suggested.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from headswap.errors import ConfigError, DataError, HeadswapError

logger = logging.getLogger(__name__)

STRATEGIES = ("margin-kmeans", "margin", "entropy", "random")
DEFAULT = "margin-kmeans"
PREFILTER = 10      # Zhdanov's beta: k-means runs on the 10 x n most uncertain texts
FILES = ("to_label.csv", "label_studio.json", "label_studio_config.xml", "suggest.json")
COLUMNS = ("rank", "row", "text", "predicted_label", "confidence", "second_label", "margin", "cluster", "why")


# ---- selection: arrays in, indices out (the benchmark calls this too) -----------------------------------------
def margins(probs: np.ndarray) -> np.ndarray:
    """(N,) probability of the most probable class minus the second's: small is uncertain."""
    top2 = np.sort(np.asarray(probs, dtype=np.float64), axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def entropies(probs: np.ndarray) -> np.ndarray:
    """(N,) prediction entropy in nats: large is uncertain."""
    from scipy.stats import entropy
    return entropy(np.asarray(probs, dtype=np.float64), axis=1)


def select(probs: np.ndarray, n: int, features: np.ndarray | None = None, strategy: str = DEFAULT,
           eligible: np.ndarray | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(indices of the n texts to label next, most useful first; each one's k-means group, -1 for none) among the
    rows of `probs` ((N, K) probabilities) where `eligible` ((N,) bools, default all) is true. `features`: (N, D)
    pooled features, which margin-kmeans clusters."""
    probs = np.asarray(probs)
    check_strategy(strategy)
    pool = np.flatnonzero(np.ones(len(probs), dtype=bool) if eligible is None else eligible)
    n = check_n(n, len(pool))
    none = np.full(n, -1)
    if strategy == "random":
        return np.random.default_rng(seed).choice(pool, size=n, replace=False), none
    if strategy == "entropy":
        order = pool[np.argsort(-entropies(probs[pool]), kind="stable")]
        return order[:n], none
    margin = margins(probs[pool])
    order = pool[np.argsort(margin, kind="stable")]      # most uncertain first, ties in pool order
    if strategy == "margin" or features is None or n == len(pool):
        return order[:n], none
    from sklearn.cluster import KMeans
    from sklearn.preprocessing import normalize
    candidates = order[:min(len(pool), PREFILTER * n)]
    weight = 1.0 - margins(probs[candidates]) + 1e-6
    x = normalize(np.asarray(features, dtype=np.float64)[candidates])
    groups = KMeans(n_clusters=n, n_init=1, random_state=seed).fit_predict(x, sample_weight=weight)
    chosen, seen = [], set()
    for i, g in zip(candidates, groups):     # candidates run most uncertain first: each group's first is its pick
        if g not in seen:
            seen.add(g)
            chosen.append((i, g))
    # k-means can leave a group empty (identical features): fill up with the next most uncertain texts
    taken = {i for i, _ in chosen}
    chosen += [(i, -1) for i in candidates if i not in taken][: n - len(chosen)]
    return np.array([i for i, _ in chosen]), np.array([g for _, g in chosen])


def check_strategy(strategy) -> None:
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown suggest strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")


def check_n(n, pool: int, flag: str = "n") -> int:
    """How many texts to suggest: n, or the whole pool where it holds fewer (a small pool is all worth labelling,
    most useful first, as a search engine gives every hit when there are fewer than a page)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
        raise ConfigError(f"{flag} must be a whole number >= 1 (the texts to suggest), got {n!r}")
    if pool == 0:
        raise DataError("the pool has no texts left to suggest (every text is already labelled)")
    return min(int(n), pool)


# ---- on a model ---------------------------------------------------------------------------------------------
@dataclass
class Suggestions:
    """What suggest() chose: `rows`, one dict per text in COLUMNS (plus its 0-based `index` in the input), most
    useful first; `classes`, the model's labels; `summary`, counts and settings."""

    rows: list[dict]
    classes: list[str]
    summary: dict = field(default_factory=dict)

    @property
    def texts(self) -> list[str]:
        return [r["text"] for r in self.rows]

    def write(self, out, extra: dict | None = None) -> list[Path]:
        """OUT/to_label.csv, label_studio.json (tasks with the model's predictions), label_studio_config.xml
        (the labelling interface to paste into the project) and suggest.json: all four, or (a failure) none. A file
        of one of these names that headswap did not write (or one changed since, being labelled) is refused."""
        from headswap.saved.outputs import check_folder, writing
        out = Path(out)
        check_folder("out", out, FILES)
        out.mkdir(parents=True, exist_ok=True)
        summary = {**self.summary, **(extra or {})}
        tasks = label_studio_tasks(self, str(summary.get("model") or "headswap"))
        texts = [to_csv(self.rows), json.dumps(tasks, indent=1, ensure_ascii=False) + "\n",
                 label_studio_config(self.classes),
                 json.dumps(summary, indent=2, default=str) + "\n"]
        with writing(out, FILES) as tmp:
            for path, text in zip(tmp, texts):
                path.write_text(text, encoding="utf-8")
        return [out / name for name in FILES]


def suggest(model, texts, n: int, exclude=None, strategy: str = DEFAULT, seed: int = 0,
            rows: list[int] | None = None) -> Suggestions:
    """The n texts of `texts` worth labelling next for `model` (a TextClassifier, TfidfClassifier or Blend),
    never one in `exclude` and never a text twice. `rows`: each text's line in its file, for the output."""
    from headswap.data.load import as_list, from_lists
    check_strategy(strategy)
    data = from_lists(texts, None, "suggest pool")
    rows = list(rows) if rows is not None else data.rows
    exclude = [] if exclude is None else as_list(exclude, "exclude")
    labelled = set(from_lists(exclude, None, "exclude").texts) if exclude else set()
    first: dict[str, int] = {}
    for i, t in enumerate(data.texts):
        if t not in labelled:
            first.setdefault(t, i)
    pool = np.array(sorted(first.values()), dtype=np.int64)
    asked, n = n, check_n(n, len(pool))
    if n < asked:
        logger.warning("asked for %d texts to label, but the pool holds %d distinct unlabelled texts: all %d are "
                       "suggested, most useful first", asked, n, n)
    if getattr(model, "multi_label", False):
        raise HeadswapError("suggest ranks single-label models; this model is multi-label")
    probs, feats = scores(model, [data.texts[i] for i in pool])
    classes = [str(c) for c in model.labels_]
    picked, groups = select(probs, n, feats, strategy, seed=seed)
    margin = margins(probs)
    order = np.argsort(-probs, axis=1)
    out = []
    for rank, (j, g) in enumerate(zip(picked, groups), 1):
        i, k1, k2 = int(pool[j]), int(order[j, 0]), int(order[j, 1])
        out.append({"rank": rank, "index": i, "row": rows[i], "text": data.texts[i], "predicted_label": classes[k1],
                    "confidence": round(float(probs[j, k1]), 6), "second_label": classes[k2],
                    "margin": round(float(margin[j]), 6), "cluster": int(g),
                    "why": why(strategy, probs[j], classes, k1, k2, margin[j], margin, g, feats is not None)})
    summary = {"strategy": strategy if feats is not None or strategy != DEFAULT else "margin (no pooled features)",
               "seed": seed, "n": n, "asked": asked, "pool_texts": len(data), "distinct_unlabelled": int(len(pool)),
               "excluded_as_labelled": sum(t in labelled for t in data.texts),
               "duplicates_skipped": len(data) - sum(t in labelled for t in data.texts) - int(len(pool)),
               "prefilter": PREFILTER if strategy == DEFAULT and feats is not None else None,
               "mean_margin_chosen": float(np.mean(margin[picked])), "mean_margin_pool": float(np.mean(margin)),
               "predicted_labels_chosen": dict(sorted(Counter(r["predicted_label"] for r in out).items()))}
    return Suggestions(out, classes, summary)


def scores(model, texts: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
    """((N, K) probabilities as predict_proba gives them, (N, D) pooled features or None), from one pass."""
    if hasattr(model, "encoder_") and hasattr(model, "temperature_step_"):     # a fitted TextClassifier
        logits, feats = model.logits_and_features(texts)
        return model.temperature_step_.apply(logits).astype(np.float64), feats
    return np.asarray(model.predict_proba(texts), dtype=np.float64), None


def why(strategy, p, classes, k1, k2, m, pool_margins, group, clustered) -> str:
    """One line a labeller can read: what made this text worth labelling."""
    if strategy == "random":
        return "random draw"
    if strategy == "entropy":
        return f"spread over the classes: entropy {float(entropies(p[None])[0]):.2f} nats"
    share = float(np.mean(pool_margins <= m))
    text = (f"torn between {classes[k1]} ({p[k1]:.2f}) and {classes[k2]} ({p[k2]:.2f}): margin {m:.3f}, "
            f"smaller than {1 - share:.0%} of the pool")
    if strategy == DEFAULT and clustered and group >= 0:
        text += f"; the most uncertain of its k-means group {group}"
    return text


# ---- files ----------------------------------------------------------------------------------------------------
def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        writer.writerow([f"{r[c]:.6f}" if isinstance(r[c], float) else r[c] for c in COLUMNS])   # no 7.3e-05
    return buf.getvalue()


def label_studio_tasks(result: Suggestions, version: str = "headswap") -> list[dict]:
    """Label Studio's JSON import: one task per text, the model's guess as a pre-annotation (a prediction, tagged
    with `version`) for the labeller to accept or change; the control and object names match
    label_studio_config()."""
    return [{"data": {"text": r["text"], "row": r["row"], "rank": r["rank"], "why": r["why"]},
             "predictions": [{"model_version": version, "score": r["confidence"],
                              "result": [{"from_name": "label", "to_name": "text", "type": "choices",
                                          "value": {"choices": [r["predicted_label"]]}}]}]}
            for r in result.rows]


def label_studio_config(classes: list[str]) -> str:
    """The labelling interface (Label Studio's XML config) for the tasks: the text and one choice per class."""
    from xml.sax.saxutils import quoteattr
    choices = "\n".join(f"    <Choice value={quoteattr(c)}/>" for c in classes)
    return ('<View>\n  <Text name="text" value="$text"/>\n'
            f'  <Choices name="label" toName="text" choice="single" showInLine="true">\n{choices}\n'
            "  </Choices>\n</View>\n")
