"""Classifiers blended: p = sum_i w_i p_i, the members and their weights chosen on validation by greedy ensemble
selection (Caruana et al. 2004, what auto-sklearn and AutoGluon ship).

A lexical model and a neural one make different mistakes (a rare word, a name, a misspelling the body's word
pieces blur), and so do a frozen head and a fine-tune of the same body, so their averaged probabilities can beat
each alone; `auto` ships a blend only when held-out folds of validation say so (headswap.auto.ship). The blend is a
model directory of its own kind holding every member, each saved as it would be alone: predict, eval, serve and
batch prediction load it with load_model.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from headswap.data.records import some_texts
from headswap.data.sampling import stratified_folds
from headswap.decisions import earned
from headswap.errors import HeadswapError
from headswap.saved.model_dir import CONFIG_FILE, FORMAT_VERSION, read_config

KIND = "blend"
MEMBERS = "members"          # OUT/members/0, OUT/members/1, ...
STEPS = 25     # rounds of greedy selection: a member's weight is a multiple of 1/25 (AutoGluon's ensemble_size 25)
MOST = 3       # distinct members at most: each is a forward pass at prediction time
FOLDS = 5      # the selection is checked out of fold: each fold blended as the other folds chose


@dataclass
class Selection:
    """What select() chose: how many of the STEPS rounds each candidate won (its weight: count / sum), the chosen
    blend's validation score, and out of fold the scores of selecting so and of taking the best candidate alone;
    given a prior, each also with its decisions leaned toward the rarer classes (headswap.decisions.balance)."""
    counts: list[int]
    score: float
    out_of_fold: float | None
    alone_out_of_fold: float | None
    leaned_out_of_fold: float | None = None
    alone_leaned_out_of_fold: float | None = None
    tied: int = 0      # how many near-tied candidates started the blend (0: none; select's sorted initialisation)

    @property
    def weights(self) -> list[float]:
        total = sum(self.counts)
        return [c / total for c in self.counts]

    @property
    def kept(self) -> bool:
        """A blend of two or more which out of fold scored above the best candidate alone (each with its decisions
        leaned, where that scored higher); one started from near-tied candidates, at least as high: where
        validation cannot tell them apart, their average is the safer bet than whichever came first."""
        if sum(c > 0 for c in self.counts) < 2 or self.out_of_fold is None:
            return False
        ours = _better(self.out_of_fold, self.leaned_out_of_fold)
        alone = _better(self.alone_out_of_fold, self.alone_leaned_out_of_fold)
        return ours >= alone if self.tied else ours > alone

    @property
    def shipped_out_of_fold(self) -> tuple[float | None, float | None]:
        """What ships (the blend when kept, else the best alone) out of fold: (with the argmax, leaned)."""
        return ((self.out_of_fold, self.leaned_out_of_fold) if self.kept else
                (self.alone_out_of_fold, self.alone_leaned_out_of_fold))

    @property
    def lean_pays(self) -> bool:
        """Whether what ships scored higher out of fold with its decisions leaned than with the argmax."""
        before, after = self.shipped_out_of_fold
        return before is not None and after is not None and after > before


def _better(argmax: float, leaned: float | None) -> float:
    return argmax if leaned is None else max(argmax, leaned)


def select(probas: Sequence[np.ndarray], y: np.ndarray, labels: list[str], metric: str = "macro_f1",
           seed: int = 0, most: int = MOST, picked_from: Sequence[Sequence[np.ndarray]] | None = None,
           prior: np.ndarray | None = None) -> Selection:
    """Greedy ensemble selection with replacement over the candidates' validation probabilities (aligned columns,
    the most trusted first: ties go to the earlier candidate and to the smaller blend). The candidates a paired
    bootstrap cannot tell from the best (headswap.metrics.near_ties; macro F1) start the blend together, and it is
    kept when out of fold it scores at least as high as the best alone: on 300 SMS texts TF-IDF, a frozen MiniLM
    head and a fine-tune all scored 1.0 on the 30 held out, and the earliest, TF-IDF, shipped.

    A blend picked on a few hundred texts is partly picked for their noise (on GermEval's 451, a TF-IDF share 2.3
    points ahead on validation was 1.4 behind on test). So each of FOLDS stratified folds is blended as the other
    folds select, and the best candidate alone is chosen the same way: Selection.kept only when the blends score
    higher out of fold. `picked_from[i]`, where given, holds candidate i's probabilities at every validation its
    kept weights were picked among (a fine-tune validated a dozen times keeps the best): out of fold each fold takes
    the one the other folds pick. The kept one's score on all the texts is the top of many noisy draws: on GermEval
    2018 a fine-tune's 0.8062 there scored 0.7770 on test, where its blend with TF-IDF, out of fold 1.3 points
    behind that 0.8062, scored 0.7893. `prior` (the classes' training shares; macro F1 only): each fold is also
    decided leaned toward the rarer classes, with the tau the other folds tune on their own blend and best alone,
    and the folds are scored so even when no blend is chosen."""
    from headswap.decisions import balance
    from headswap.metrics import confusion_matrix, macro_f1, near_ties

    probas = [np.asarray(p, dtype=np.float64) for p in probas]
    options = [[q for q in (np.asarray(q, dtype=np.float64) for q in (picked_from[i] if picked_from else None) or ())
                if q.shape == p.shape] for i, p in enumerate(probas)]
    k = len(labels)

    def score(probs, idx) -> float:
        if metric == "macro_f1":      # score_logits' macro F1 (every label, 0 where unseen) at ~1% of its cost:
            return float(macro_f1(confusion_matrix(y[idx], probs[idx].argmax(1), k)))  # thousands of blends scored
        from headswap.train.loop import score_logits
        return float(score_logits(np.log(np.clip(probs[idx], 1e-12, 1)), y[idx], labels).score(metric))

    def picked(idx) -> list[np.ndarray]:
        """Each candidate's probabilities as `idx` would have picked them: the best there of those it was picked
        among (the earlier on a tie), or the only ones it has."""
        return [max(o, key=lambda q: score(q, idx)) if len(o) > 1 else p for p, o in zip(probas, options)]

    def tied(cands, idx) -> list[int]:
        """The candidates validation cannot tell apart on `idx` (macro F1: metrics.near_ties), at most `most`."""
        if metric != "macro_f1" or len(cands) < 2:
            return []
        near = near_ties([p[idx].argmax(1) for p in cands], y[idx], k, seed=seed)[:most]
        return near if len(near) > 1 else []

    def greedy(cands, idx, seeds=None) -> tuple[list[int], float]:
        # Sorted initialisation (Caruana et al. 2004, section 2.1): the near-tied candidates start the blend with
        # one count each, so validation's noise does not pick among them by their order.
        counts, total = [0] * len(cands), np.zeros_like(cands[0])
        for i in tied(cands, idx) if seeds is None else seeds:
            counts[i] += 1
            total += cands[i]
        start = sum(counts)
        best = (score(total / start, idx), list(counts)) if start else (-np.inf, None)
        for step in range(start, STEPS):
            tried = [(score((total + p) / (step + 1), idx), -i) for i, p in enumerate(cands)
                     if counts[i] or sum(c > 0 for c in counts) < most]
            s, i = max(tried)
            counts[-i] += 1
            total += cands[-i]
            if s > best[0]:
                best = (s, list(counts))
        return best[1], best[0]

    def alone(cands, idx) -> int:
        """The candidate that scores best alone on `idx` (ties: the earlier)."""
        return max(range(len(cands)), key=lambda i: (score(cands[i], idx), -i))

    def mixed(counts, cands, rows):
        return sum(c * p[rows] for c, p in zip(counts, cands) if c) / sum(counts)

    everything = np.arange(len(y))
    seeds = tied(probas, everything)
    counts, best = greedy(probas, everything, seeds)
    blends, leans = sum(c > 0 for c in counts) > 1, prior is not None and metric == "macro_f1"
    if not (blends or leans) or len(y) < 2 * FOLDS:
        return Selection(counts, best, None, None, tied=len(seeds))
    fold = stratified_folds(y, FOLDS, seed)
    blended, single = np.empty_like(probas[0]), np.empty_like(probas[0])
    leaned, single_leaned = np.empty(len(y), dtype=int), np.empty(len(y), dtype=int)
    for f in range(FOLDS):
        rest, here = np.flatnonzero(fold != f), fold == f
        cands = picked(rest)
        weights, a = greedy(cands, rest)[0], alone(cands, rest)
        blended[here], single[here] = mixed(weights, cands, here), cands[a][here]
        if leans:
            tau = balance.best_tau(mixed(weights, cands, rest), y[rest], prior)
            leaned[here] = balance.decide(blended[here], prior, tau)
            single_leaned[here] = balance.decide(single[here], prior, balance.best_tau(cands[a][rest], y[rest], prior))
    decided = (lambda d: float(macro_f1(confusion_matrix(y, d, k)))) if leans else (lambda d: None)
    return Selection(counts, best, score(blended, everything) if blends else None, score(single, everything),
                     decided(leaned) if blends else None, decided(single_leaned), len(seeds))


def same_labels(a, b) -> bool:
    """Whether the two classifiers know the same labels, in whatever order."""
    return sorted(map(str, a.labels_)) == sorted(map(str, b.labels_))


def columns(reference, other) -> list[int]:
    """Where each of reference's labels is among other's columns (TF-IDF sorts labels as text, a TextClassifier
    sorts numeric ones as numbers: "10" and "2" swap); an error when they are not the same labels."""
    if not same_labels(reference, other):
        raise HeadswapError(f"a blend's members must have the same labels; got {list(reference.labels_)} and "
                            f"{list(other.labels_)}")
    theirs = {str(lab): k for k, lab in enumerate(other.labels_)}
    return [theirs[str(lab)] for lab in reference.labels_]


def _is_tfidf(model) -> bool:
    from headswap.baseline.tfidf import TfidfClassifier
    return isinstance(model, TfidfClassifier)


class Blend:
    """The members' probabilities averaged with their weights, in the lead member's label order (the first that is
    not TF-IDF: its classes_ keep integer labels integers). Single-label members without a reject option only."""

    multi_label, out_of_scope, label_separator = False, None, None

    def __init__(self, members: Sequence[tuple[object, float]]):
        members = list(members)
        if len(members) < 2:
            raise HeadswapError(f"a blend has two members or more, got {len(members)}")
        for model, w in members:
            if isinstance(model, Blend):
                raise HeadswapError("a blend's member cannot be a blend")
            if getattr(model, "multi_label", False) or getattr(model, "out_of_scope", None) is not None:
                raise HeadswapError("a blend takes single-label models without a reject option")
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 < w < math.inf:
                raise HeadswapError(f"a blend member's weight is a number above 0 (the weights are scaled to sum "
                                    f"to 1), got {w!r}")
        total = sum(w for _, w in members)
        self.members_ = [(m, float(w) / total) for m, w in members]
        self.model_ = next((m for m, _ in self.members_ if not _is_tfidf(m)), self.members_[0][0])
        self.columns_ = [columns(self.model_, m) for m, _ in self.members_]
        from headswap.decisions.postprocess import Balance     # (torch: not at import, for TF-IDF's sake)
        self.balance_step_ = Balance()    # auto leans the decisions toward rare classes where validation says so

    @property
    def weights(self) -> list[float]:
        return [w for _, w in self.members_]

    @property
    def labels_(self) -> list[str]:
        return [str(c) for c in self.model_.labels_]

    @property
    def classes_(self) -> np.ndarray:
        return np.asarray(self.model_.classes_)      # what the lead predicts alone: ints stay ints

    @property
    def strategy(self) -> str:
        return " + ".join(dict.fromkeys(m.strategy for m, _ in self.members_))

    @property
    def model(self) -> str:
        return self.model_.model

    @property
    def runtime_(self) -> str:
        return " + ".join(dict.fromkeys("scikit-learn" if _is_tfidf(m) else m.runtime_ for m, _ in self.members_))

    @property
    def progress(self) -> bool:
        return getattr(self.model_, "progress", False)

    @progress.setter
    def progress(self, value: bool) -> None:
        for m, _ in self.members_:
            if not _is_tfidf(m):
                m.progress = value

    def predict_proba(self, X) -> np.ndarray:
        """The members' probabilities averaged, within the bound of the member checked on the fewest texts
        (headswap.decisions.earned; auto's members share it, and their average is already within)."""
        texts = some_texts(X, "prediction input")
        probs = sum(w * m.predict_proba(texts)[:, cols] for (m, w), cols in zip(self.members_, self.columns_))
        bounds = [b for b in map(earned.of, (m for m, _ in self.members_)) if b is not None]
        return (max(bounds, key=lambda b: b.eps).clip(probs) if bounds else probs).astype(np.float32)

    def decision_function(self, X) -> np.ndarray:
        """Log-probabilities: the logits whose softmax is predict_proba."""
        return np.log(np.clip(self.predict_proba(X), 1e-12, 1))

    def predict(self, X) -> np.ndarray:
        return self.decide(self.predict_proba(X))

    def decide(self, probs) -> np.ndarray:
        """From predict_proba's output, the classes predict() answers."""
        return self.classes_[self.balance_step_.adjust(probs).argmax(1)]

    def score(self, X, y) -> float:
        return float(np.mean([str(p) == str(t) for p, t in zip(self.predict(X), y)]))

    def _params(self) -> tuple[int, int]:
        """(trainable, total) parameters of all members."""
        trainable = total = 0
        for m, _ in self.members_:
            if _is_tfidf(m):
                n = int(m.model_.coef_.size + m.model_.intercept_.size)
                trainable, total = trainable + n, total + n
            else:
                counts = m.summary()
                trainable += int(counts.get("trainable_params", 0))
                total += int(counts.get("total_params", 0))
        return trainable, total

    def evaluate(self, X, y):
        """Metrics on labelled texts, with timing, parameter counts and calibration in extra (as TextClassifier)."""
        from headswap.baseline import evaluate_probabilities
        m = evaluate_probabilities(self.predict_proba, X, y, self.labels_, adjust=self.balance_step_.adjust)
        trainable, total = self._params()
        m.extra.update(strategy=self.strategy, model=self.model, regime=self.model_.summary().get("regime", "-"),
                       runtime=self.runtime_, blend_weights=self.weights, trainable_params=trainable,
                       total_params=total)
        return m

    def summary(self) -> dict:
        trainable, total = self._params()
        return {**self.model_.summary(), "strategy": self.strategy, "runtime": self.runtime_,
                "blend_weights": self.weights, "trainable_params": trainable, "total_params": total}

    # ---- save / load: each member in its own folder, as it saves alone ------------------------------------
    def save(self, path, save_member=None) -> Path:
        """Write the blend into `path`; save_member(model, folder) writes each member (default: its own save;
        auto passes its exporter)."""
        from headswap.saved.atomic import atomic_path
        from headswap.saved.outputs import check_save
        path = Path(path)
        check_save(path)
        (path / MEMBERS).mkdir(parents=True, exist_ok=True)
        entries = []
        for i, (m, w) in enumerate(self.members_):
            (save_member or (lambda model, folder: model.save(folder)))(m, path / MEMBERS / str(i))
            entries.append({"folder": f"{MEMBERS}/{i}", "weight": w})
        config = {"format": "headswap", "format_version": FORMAT_VERSION, "kind": KIND, "labels": self.labels_,
                  "members": entries, **self.balance_step_.config()}
        with atomic_path(path / CONFIG_FILE) as tmp:
            tmp.write_text(json.dumps(config, indent=1))
        return path

    @classmethod
    def load(cls, path, load_model) -> "Blend":
        """The blend saved in `path`; load_model(folder) loads a neural member (headswap.classifier.estimator.load_model
        passes TextClassifier.load with its runtime). Reads the two-member layout of earlier versions too
        ({"weight": w, "members": {"model": ..., "tfidf": ...}})."""
        from headswap.baseline.tfidf import KIND as TFIDF, TfidfClassifier
        path = Path(path)
        config = read_config(path)
        if config.get("kind") != KIND:
            raise HeadswapError(f"{path} is not a blend (kind {config.get('kind')!r})")
        entries = config.get("members")
        if isinstance(entries, dict):      # the earlier layout: a model and TF-IDF at weight w
            w = config.get("weight")
            if not isinstance(w, (int, float)) or isinstance(w, bool) or not 0 < w < 1:
                raise HeadswapError(f"{path / CONFIG_FILE} is corrupt: weight must be a number between 0 and 1, "
                                    f"got {w!r:.80}")
            entries = [{"folder": entries.get("model"), "weight": 1 - w}, {"folder": entries.get("tfidf"), "weight": w}]
        if not isinstance(entries, list) or len(entries) < 2 or not all(isinstance(e, dict) for e in entries):
            raise HeadswapError(f"{path / CONFIG_FILE} is corrupt: members must be a list of two or more")
        members = []
        for e in entries:
            name, w = e.get("folder"), e.get("weight")
            if not isinstance(w, (int, float)) or isinstance(w, bool) or not 0 < w <= 1:
                raise HeadswapError(f"{path / CONFIG_FILE} is corrupt: member {name!r:.80}'s weight must be a number "
                                    f"above 0 and at most 1, got {w!r:.80}")
            folder = path / str(name)
            if not isinstance(name, str) or not name.startswith(f"{MEMBERS}/") or ".." in Path(name).parts:
                raise HeadswapError(f"{path / CONFIG_FILE} is corrupt: a member's folder must be under {MEMBERS}/, "
                                    f"got {name!r:.80}")
            if not folder.is_dir() or folder.is_symlink():
                raise HeadswapError(f"{path} is a damaged blend: its member {name} is missing")
            kind = read_config(folder).get("kind")
            if kind == KIND:
                raise HeadswapError(f"{path} is a damaged blend: its member {name} is a blend")
            members.append((TfidfClassifier.load(folder) if kind == TFIDF else load_model(folder), w))
        blend = cls(members)
        if blend.labels_ != [str(v) for v in config.get("labels") or ()]:
            raise HeadswapError(f"{path / CONFIG_FILE} is corrupt: its labels are not its members'")
        blend.balance_step_ = type(blend.balance_step_).load(path, config)
        return blend
