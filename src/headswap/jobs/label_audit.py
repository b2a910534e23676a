"""Find label errors and near-duplicate texts in training data before training on it, with cleanlab.

    from headswap import audit
    result = audit(texts, labels)            # TF-IDF, 5 stratified folds
    result.issues()[:10]                     # the likeliest label errors, worst first
    result.write("audit-out")                # label_issues.csv, near_duplicates.csv, audit.json, audit.html

1. Out-of-fold probabilities: scikit-learn's StratifiedKFold (shuffled, seeded) splits the data into `folds`
   parts; a fresh classifier (TfidfClassifier by default, or a TextClassifier of any strategy with its own
   settings) trains on all but one part and predicts the held-out one, so every text is scored by a model
   that never saw it. Every class needs at least `folds` texts (one in each held-out part).
2. Label issues: cleanlab.filter.find_label_issues (confident learning, filter_by="prune_by_noise_rate"),
   ranked by self-confidence; every text's label quality score is cleanlab.rank.get_label_quality_scores
   (method="self_confidence"): the out-of-fold probability of its given label. The suggested label is the
   out-of-fold argmax.
3. Near duplicates: cleanlab's Datalab "near_duplicate" check on the cosine k-nearest-neighbour graph (k=10)
   of the TF-IDF features (word 1-2 grams and char 2-5 grams, those of TfidfClassifier). The graph is built
   by scikit-learn on the sparse features and handed to Datalab as its documented `knn_graph` input, because
   Datalab's own graph needs dense features (hundreds of thousands of columns here). Datalab calls two texts
   near duplicates when their distance is below 0.13 x the median nearest-neighbour distance (its default
   threshold); a group is a connected set of such pairs, and its labels conflict when they are not all equal.

Nothing here changes the data: the result only reports rows, by their line in the file.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from headswap.data.load import LabelledData, check_training_data, from_lists
from headswap.errors import ConfigError, DataError, HeadswapError

TFIDF = "tfidf"
NEAR_DUPLICATE_K = 10
NEAR_DUPLICATE_THRESHOLD = 0.13     # cleanlab Datalab's default, a fraction of the median nearest-neighbour distance
FILES = ("label_issues.csv", "near_duplicates.csv", "audit.json", "audit.html")
ISSUE_COLUMNS = ("rank", "row", "text", "given_label", "suggested_label", "label_quality", "is_issue")
DUPLICATE_COLUMNS = ("group", "row", "text", "label", "group_size", "group_labels", "conflicting_labels",
                     "nearest_distance")
HTML_TOP = 100


@dataclass
class Audit:
    """What audit() found. `label_issues`: one dict per text (index, row, text, given_label, suggested_label,
    label_quality, is_issue, rank), cleanlab's issues first (worst first), then the rest by label quality.
    `near_duplicates`: one dict per text in a near-duplicate group, groups with conflicting labels first.
    `pred_probs`: the (N, K) out-of-fold probabilities over `classes`. `summary`: counts, settings, timing."""

    source: str
    row_unit: str
    classes: list[str]
    pred_probs: np.ndarray
    label_issues: list[dict]
    near_duplicates: list[dict]
    summary: dict = field(default_factory=dict)

    def issues(self) -> list[dict]:
        """The texts cleanlab flags as likely label errors, worst (lowest label quality) first."""
        return [r for r in self.label_issues if r["is_issue"]]

    def conflicting_duplicates(self) -> list[dict]:
        """The texts of near-duplicate groups whose labels differ."""
        return [r for r in self.near_duplicates if r["conflicting_labels"]]

    def write(self, out, extra: dict | None = None) -> list[Path]:
        """Write OUT/label_issues.csv, near_duplicates.csv, audit.json and audit.html, all four or (a failure)
        none; other files in OUT are left alone, and a file of one of these names that headswap did not write is
        refused. `extra`: more keys for audit.json (the command line, the data path)."""
        from headswap.saved.outputs import check_folder, writing
        out = Path(out)
        check_folder("out", out, FILES[:4])
        out.mkdir(parents=True, exist_ok=True)
        summary = {**self.summary, **(extra or {})}
        texts = [_csv(ISSUE_COLUMNS, self.label_issues), _csv(DUPLICATE_COLUMNS, self.near_duplicates),
                 json.dumps(summary, indent=2, default=str) + "\n", render_html(self, summary)]
        with writing(out, FILES[:4]) as tmp:    # the four of one audit, or (a full disk) the previous four
            for path, text in zip(tmp, texts):
                path.write_text(text, encoding="utf-8")
        return [out / name for name in FILES[:4]]


def audit(texts, labels, strategy: str = TFIDF, folds: int = 5, *, seed: int = 0, progress: bool = False,
          near_duplicate_threshold: float = NEAR_DUPLICATE_THRESHOLD, **settings) -> Audit:
    """Find likely label errors (cleanlab, on out-of-fold probabilities of `folds`-fold stratified cross-validation)
    and near-duplicate texts (cleanlab Datalab, on TF-IDF features) in `texts` with single `labels`.

    strategy: "tfidf" (TfidfClassifier, the default: fast and good at this) or any TextClassifier strategy;
    `settings` are then TextClassifier's (model, epochs, ...). Rows in the result are 1-based positions."""
    data = from_lists(texts, labels, source="<memory>")
    return audit_data(data, strategy, folds, seed=seed, progress=progress,
                      near_duplicate_threshold=near_duplicate_threshold, settings=settings)


def audit_data(data: LabelledData, strategy: str = TFIDF, folds: int = 5, *, seed: int = 0, progress: bool = False,
               near_duplicate_threshold: float = NEAR_DUPLICATE_THRESHOLD, settings: dict | None = None,
               notify: Callable[[str], None] | None = None) -> Audit:
    """audit() on loaded data (headswap.data.load.LabelledData), whose row numbers the result reports."""
    t_start = time.perf_counter()
    require_cleanlab()
    check_folds(folds)
    make, described = classifier_factory(strategy, seed, progress, settings or {})
    classes = check_training_data(data)
    check_class_sizes(data, folds)
    say = notify or ((lambda msg: print(msg, file=sys.stderr)) if progress else (lambda msg: None))

    t0 = time.perf_counter()
    probs, fold_seconds = out_of_fold_probabilities(data.texts, data.labels, classes, folds, seed, make, say)
    oof_seconds = time.perf_counter() - t0

    t0 = time.perf_counter()
    import cleanlab
    from cleanlab.filter import find_label_issues
    from cleanlab.rank import get_label_quality_scores
    index = {c: k for k, c in enumerate(classes)}
    y = np.array([index[label] for label in data.labels])
    ranked = find_label_issues(labels=y, pred_probs=probs, return_indices_ranked_by="self_confidence", n_jobs=1)
    scores = get_label_quality_scores(y, probs, method="self_confidence")
    issue_seconds = time.perf_counter() - t0
    rows = issue_rows(data, classes, probs, scores, ranked)

    t0 = time.perf_counter()
    say("near duplicates: cleanlab Datalab on a cosine nearest-neighbour graph of the TF-IDF features")
    duplicates, dup_info = near_duplicates(data, near_duplicate_threshold)
    dup_seconds = time.perf_counter() - t0

    issues = [r for r in rows if r["is_issue"]]
    groups = {r["group"] for r in duplicates}
    conflicting = {r["group"] for r in duplicates if r["conflicting_labels"]}
    import sklearn

    from headswap import __version__
    summary = {
        "source": data.source,
        "rows": len(data),
        "classes": dict(sorted(Counter(data.labels).items())),
        "counts": {
            "label_issues": len(issues),
            "label_issue_share": len(issues) / len(data),
            "label_issues_by_given_label": dict(sorted(Counter(r["given_label"] for r in issues).items())),
            "out_of_fold_accuracy": float(np.mean(probs.argmax(1) == y)),
            "near_duplicate_groups": len(groups),
            "near_duplicate_rows": len(duplicates),
            "conflicting_label_groups": len(conflicting),
            "conflicting_label_rows": sum(r["conflicting_labels"] for r in duplicates),
        },
        "settings": {
            "strategy": strategy, "folds": folds, "seed": seed, "classifier": described,
            "cross_validation": "sklearn.model_selection.StratifiedKFold(shuffle=True, random_state=seed)",
            "label_issues": {"method": "cleanlab.filter.find_label_issues", "filter_by": "prune_by_noise_rate",
                             "return_indices_ranked_by": "self_confidence",
                             "label_quality": "cleanlab.rank.get_label_quality_scores(method='self_confidence')"},
            "near_duplicates": dup_info,
        },
        "versions": {"headswap": __version__, "cleanlab": cleanlab.__version__, "scikit-learn": sklearn.__version__},
        "timing": {"out_of_fold_seconds": oof_seconds, "fold_seconds": fold_seconds,
                   "label_issues_seconds": issue_seconds, "near_duplicates_seconds": dup_seconds,
                   "total_seconds": time.perf_counter() - t_start},
        "top_issues": [{k: r[k] for k in ISSUE_COLUMNS} for r in issues[:10]],
    }
    return Audit(data.source, data.row_unit, classes, probs, rows, duplicates, summary)


# ---- checks ---------------------------------------------------------------------------------------------------


def require_cleanlab() -> None:
    """cleanlab and its Datalab (which needs Hugging Face datasets) import, or one line saying what to install."""
    try:
        import cleanlab
        from cleanlab.datalab.datalab import Datalab  # noqa: F401
    except ImportError as e:
        raise HeadswapError(f"the audit needs cleanlab with its Datalab ({e}); install it with "
                            f"pip install 'headswap[audit]' (or 'cleanlab[datalab]>=2.6')") from None
    if tuple(int(p) for p in cleanlab.__version__.split(".")[:2] if p.isdigit()) < (2, 6):
        raise HeadswapError(f"the audit needs cleanlab 2.6 or newer, found {cleanlab.__version__}; "
                            f"pip install 'headswap[audit]'")


def check_folds(folds, flag: str = "folds") -> None:
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
        raise ConfigError(f"{flag} must be a whole number >= 2 (the parts of the cross-validation), got {folds!r}")


def check_class_sizes(data: LabelledData, folds: int, flag: str = "folds") -> None:
    """Every class needs a text in each fold's held-out part: at least `folds` texts."""
    counts = Counter(data.labels)
    small = sorted((n, label) for label, n in counts.items() if n < folds)
    if small:
        n, label = small[0]
        others = f" (and {len(small) - 1} more class{'es' if len(small) > 2 else ''})" if len(small) > 1 else ""
        fix = f"use {flag} {n} or fewer, or " if n >= 2 else ""
        raise DataError(f"{data.source}: class {label!r} has {n} text{'s' if n != 1 else ''}{others}, fewer than the "
                        f"{folds} folds: stratified k-fold holds out texts of every class in each fold; "
                        f"{fix}add texts of that class")


def classifier_factory(strategy: str, seed: int, progress: bool, settings: dict):
    """(a function that makes a fresh, unfitted classifier; its settings as a dict for the record). The settings
    are checked here, before any data is read or a model loads."""
    if strategy == TFIDF:
        if settings:
            raise ConfigError(f"the TF-IDF audit takes no TextClassifier settings ({', '.join(sorted(settings))}); "
                              f"give a TextClassifier strategy to use them")
        from headswap.baseline.tfidf import TfidfClassifier
        return TfidfClassifier, {"class": "headswap.baseline.tfidf.TfidfClassifier", **TfidfClassifier().get_params()}
    from headswap import settings as declared
    if strategy not in declared.STRATEGIES:
        raise ConfigError(f"unknown strategy {strategy!r}; choose {TFIDF} or one of {', '.join(declared.STRATEGIES)}")
    from headswap.classifier.estimator import TextClassifier
    params = {**settings, "strategy": strategy, "seed": seed, "progress": progress}
    resolved = TextClassifier(**params).resolved_params()     # raises ConfigError naming a bad setting

    def make():
        return TextClassifier(**params)
    return make, {"class": "headswap.TextClassifier",
                  **{k: v for k, v in resolved.items() if k != "progress" and isinstance(v, (str, int, float, bool,
                                                                                               type(None)))}}


# ---- the three steps ------------------------------------------------------------------------------------------


def out_of_fold_probabilities(texts, labels, classes, folds, seed, make, say) -> tuple[np.ndarray, list[float]]:
    """(N, K) probabilities over `classes`, each row from a classifier trained on the other folds."""
    from sklearn.model_selection import StratifiedKFold
    index = {c: k for k, c in enumerate(classes)}
    y = np.array([index[label] for label in labels])
    probs = np.zeros((len(texts), len(classes)))
    seconds = []
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    for fold, (train, held) in enumerate(splitter.split(np.zeros(len(y)), y), 1):
        t0 = time.perf_counter()
        clf = make()
        clf.fit([texts[i] for i in train], [labels[i] for i in train])
        p = np.asarray(clf.predict_proba([texts[i] for i in held]), dtype=np.float64)
        columns = [index[str(c)] for c in clf.labels_]
        probs[np.ix_(held, columns)] = p
        seconds.append(time.perf_counter() - t0)
        accuracy = np.mean(probs[held].argmax(1) == y[held])
        say(f"fold {fold}/{folds}: trained on {len(train)} texts, scored {len(held)} (accuracy {accuracy:.3f}) "
            f"in {seconds[-1]:.1f} s")
    probs = np.clip(probs, 0, None)
    probs /= np.where(probs.sum(1, keepdims=True) > 0, probs.sum(1, keepdims=True), 1)
    return probs, seconds


def issue_rows(data: LabelledData, classes, probs, scores, ranked) -> list[dict]:
    """One dict per text: cleanlab's issues first in its order (lowest self-confidence first), then the others
    by label quality (lowest first), ties in file order."""
    flagged = {int(i): r for r, i in enumerate(ranked)}
    order = sorted(range(len(data)), key=lambda i: (0, flagged[i]) if i in flagged else (1, scores[i], i))
    suggested = probs.argmax(1)
    return [{"rank": rank, "index": i, "row": data.rows[i], "text": data.texts[i], "given_label": data.labels[i],
             "suggested_label": classes[suggested[i]], "label_quality": round(float(scores[i]), 6),
             "is_issue": i in flagged}
            for rank, i in enumerate(order, 1)]


def near_duplicates(data: LabelledData, threshold: float = NEAR_DUPLICATE_THRESHOLD,
                    k: int = NEAR_DUPLICATE_K) -> tuple[list[dict], dict]:
    """One dict per text in a near-duplicate group (cleanlab Datalab's near_duplicate check), and what was run."""
    import warnings

    from cleanlab import Datalab
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components
    from sklearn.neighbors import NearestNeighbors

    from headswap.baseline.tfidf import tfidf_features
    n = len(data)
    k = min(k, n - 1)
    features = tfidf_features().fit_transform(data.texts)
    graph = NearestNeighbors(n_neighbors=k, metric="cosine", algorithm="brute").fit(features) \
        .kneighbors_graph(mode="distance")
    graph.data = np.clip(graph.data, 0, None)      # float rounding leaves -1e-16 for identical texts
    lab = Datalab(data={"label": list(data.labels)}, label_name="label", verbosity=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lab.find_issues(knn_graph=graph, issue_types={"near_duplicate": {"threshold": threshold}})
    info = lab.get_info("near_duplicate")
    sets, nearest = info["near_duplicate_sets"], info["distance_to_nearest_neighbor"]
    pairs = [(i, int(j)) for i, members in enumerate(sets) for j in members]
    described = {"method": "cleanlab.Datalab.find_issues(knn_graph=..., issue_types={'near_duplicate': ...})",
                 "features": "TF-IDF word 1-2 grams + char_wb 2-5 grams (headswap.baseline.tfidf.tfidf_features)",
                 "metric": "cosine", "k": k, "threshold": threshold,
                 "median_nearest_distance": float(info["median_distance_to_nearest_neighbor"]),
                 "distance_below": float(threshold * info["median_distance_to_nearest_neighbor"])}
    if not pairs:
        return [], described
    a, b = zip(*pairs)
    _, component = connected_components(csr_matrix((np.ones(len(pairs)), (a, b)), shape=(n, n)), directed=False)
    members: dict[int, list[int]] = {}
    for i in sorted(set(a) | set(b)):
        members.setdefault(int(component[i]), []).append(i)
    groups = [m for m in members.values() if len(m) > 1]
    groups.sort(key=lambda m: (len({data.labels[i] for i in m}) == 1, -len(m), m[0]))
    rows = []
    for g, m in enumerate(groups, 1):
        labels = sorted({data.labels[i] for i in m})
        for i in m:
            rows.append({"group": g, "index": i, "row": data.rows[i], "text": data.texts[i], "label": data.labels[i],
                         "group_size": len(m), "group_labels": "|".join(labels),
                         "conflicting_labels": len(labels) > 1, "nearest_distance": round(float(nearest[i]), 6)})
    return rows, described


# ---- files ----------------------------------------------------------------------------------------------------


def _csv(columns, rows) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow([str(r[c]).lower() if isinstance(r[c], bool) else r[c] for c in columns])
    return buf.getvalue()


def render_html(result: Audit, summary: dict) -> str:
    """One self-contained page: the run, the top label issues, the near-duplicate groups whose labels conflict."""
    from headswap.reports.templating import CSS, html_text as _e, kv as _kv, section as _section, table as _table
    counts, settings, timing = summary["counts"], summary["settings"], summary["timing"]
    unit = "line" if result.row_unit == "line" else "position"
    pairs = [("data", f"<code>{_e(summary.get('data') or result.source)}</code>"),
             ("texts", _e(f"{summary['rows']} in {len(result.classes)} classes: "
                          + ", ".join(f"{c} {n}" for c, n in summary["classes"].items()))),
             ("classifier", _e(f"{settings['strategy']}, {settings['folds']}-fold stratified out-of-fold "
                               f"probabilities (seed {settings['seed']}), accuracy "
                               f"{counts['out_of_fold_accuracy']:.3f}")),
             ("label issues", _e(f"{counts['label_issues']} ({counts['label_issue_share']:.1%}) flagged by "
                                 "cleanlab.filter.find_label_issues")),
             ("near duplicates", _e(f"{counts['near_duplicate_groups']} groups ({counts['near_duplicate_rows']} "
                                    f"texts); {counts['conflicting_label_groups']} with conflicting labels")),
             ("time", _e(f"{timing['total_seconds']:.1f} s ({timing['out_of_fold_seconds']:.1f} s out-of-fold)"))]
    if summary.get("command"):
        pairs.append(("command", f"<code>{_e(summary['command'])}</code>"))
    issues = result.issues()
    header = [("rank", "num"), (unit, "num"), ("text", ""), ("given label", ""), ("suggested label", ""),
              ("label quality", "num")]
    body = [("", [str(r["rank"]), str(r["row"]), f'<div class="cellwrap">{_e(r["text"])}</div>',
                  _e(r["given_label"]), _e(r["suggested_label"]), f"{r['label_quality']:.3f}"])
            for r in issues[:HTML_TOP]]
    issue_html = (f"<p>The {min(HTML_TOP, len(issues))} of {len(issues)} flagged texts with the lowest label quality "
                  "(the out-of-fold probability of the given label); all of them, and every other text, are in "
                  "<code>label_issues.csv</code>.</p>" + (_table(header, body) if body else "<p>none</p>"))
    conflicting = result.conflicting_duplicates()
    shown_groups = sorted({r["group"] for r in conflicting})[:HTML_TOP]
    dup_body = [("", [str(r["group"]), str(r["row"]), f'<div class="cellwrap">{_e(r["text"])}</div>', _e(r["label"]),
                      f"{r['nearest_distance']:.3f}"])
                for r in conflicting if r["group"] in shown_groups]
    dup_html = (f"<p>{len(shown_groups)} of {counts['conflicting_label_groups']} groups of near-duplicate texts whose "
                f"labels differ; all {counts['near_duplicate_groups']} groups are in <code>near_duplicates.csv</code>."
                "</p>" + (_table([("group", "num"), (unit, "num"), ("text", ""), ("label", ""),
                                  ("nearest distance", "num")], dup_body) if dup_body else "<p>none</p>"))
    sections = [_section("summary", "Run", _kv(pairs)), _section("label-issues", "Likely label errors", issue_html),
                _section("near-duplicates", "Near duplicates with conflicting labels", dup_html)]
    title = "headswap audit"
    return ("<!DOCTYPE html>\n"
            '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_e(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
            f'<header><h1>{_e(title)}</h1><div class="muted">{_e(summary.get("date") or "")}</div></header>\n'
            + "\n".join(sections) + "\n</main>\n</body>\n</html>\n")
