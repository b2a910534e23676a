"""`headswap auto` as a scikit-learn estimator: AutoClassifier.fit runs the same engine (headswap.auto.main.auto)
on texts in memory, then predicts with the model it shipped.

    clf = AutoClassifier(budget="5m").fit(df)      # a DataFrame with text and label columns, or X and y
    print(clf.leaderboard_)                          # every candidate: validation score, seconds, status, why
    clf.leaderboard(X_test, y_test)                  # a DataFrame: the same with test scores and texts/s
    clf.predict(["where is my parcel?"]); clf.save("tickets-model")
    headswap.load_model("tickets-model")           # the shipped model, as `headswap predict` reads it
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from headswap.auto.leaderboard import Leaderboard, board_row, scored
from headswap.data.records import as_list
from headswap.errors import ConfigError


class AutoClassifier(ClassifierMixin, BaseEstimator):
    """Train what fits `budget` and keep the best on validation: `headswap auto` as an estimator (one engine).

    budget: "15m", "1h30m", "90s", or a bare number of minutes, as `headswap auto --budget` takes it (budget=90 and
    "90" are 90 min; give seconds as "90s"). models, strategies: as `headswap auto --model/--strategies` (None: the
    installed defaults; "all"). out_of_scope: the label of texts that fit no class. blend, lr_search, quantize, seed,
    prior: as auto's flags (prior: "shipped", "none" or a table's file). out: the folder for the run's results, report
    and model (None: a new temporary folder, kept). progress: auto's log lines and bars. The budget, out and prior are
    checked as the command checks them, before any work.

    After fit: model_ (the shipped classifier), classes_ (integer labels stay integers, in the saved model too),
    leaderboard_ (Leaderboard), best_ (the winner's row), results_ (results.json's content), report_ (the path of
    report.html), candidates_ (the models auto still held when it ended, which leaderboard(X, y) scores: the TF-IDF
    baseline and up to headswap.auto.climb.POOL of the best candidates, each with its row of leaderboard_; `clf.candidates_
    = []` frees them, and leaderboard(X, y) then scores the shipped model alone).
    """

    def __init__(self, budget="15m", models=None, strategies="all", out_of_scope=None, blend=True, lr_search=True,
                 quantize="none", seed=0, out=None, progress=True, prior="shipped"):
        self.budget, self.models, self.strategies, self.out_of_scope = budget, models, strategies, out_of_scope
        self.blend, self.lr_search, self.quantize, self.seed = blend, lr_search, quantize, seed
        self.out, self.progress, self.prior = out, progress, prior

    def fit(self, X, y=None, X_val=None, y_val=None):
        """Train on texts X with labels y (or X a DataFrame / datasets.Dataset with text and label columns);
        X_val, y_val: validation texts to choose on (without them a stratified tenth of X is held out)."""
        from headswap.classifier.estimator import load_model
        from headswap.auto.main import auto
        from headswap.auto.duration import parse_duration
        from headswap.auto.prior import read_table
        from headswap.trials.plan import memory_data
        from headswap.data.load import as_list, from_lists, labels_of_table
        from headswap.data.records import label_type
        from headswap.saved.atomic import output_lock
        from headswap.saved.outputs import check_run_folder
        from headswap.saved.model_dir import record_label_values

        seconds = parse_duration(self.budget)      # one rule with --budget's: a bare number is minutes
        if self.out is not None:
            check_run_folder(self.out, "out")     # the command's rule for its --out
        read_table(self.prior, "prior")
        y, y_val = labels_of_table(X, y), None if X_val is None else labels_of_table(X_val, y_val)
        y = None if y is None else as_list(y, "training data", "labels")
        integers = y is not None and label_type(y, "training data", self.out_of_scope) is int
        if y_val is not None:       # refused when it mixes integers and strings, as y
            label_type(as_list(y_val, "validation data", "labels"), "validation data", self.out_of_scope)
        train = from_lists(as_list(X, "training data"), y, "training data")
        validation = None if X_val is None else from_lists(as_list(X_val, "validation data"), y_val,
                                                           "validation data")
        out = Path(self.out) if self.out is not None else Path(tempfile.mkdtemp(prefix="headswap-auto-"))
        settings = {"seed": self.seed, **({"out_of_scope": self.out_of_scope} if self.out_of_scope else {})}
        kept = []      # (position, model): the baseline and the candidates auto held for the blend
        with output_lock(out, flag="out"):     # as the command: a folder that takes no files is one line, at once
            results = auto(memory_data(train, validation, out_of_scope=self.out_of_scope), seconds,
                           models=self.models, strategies=self.strategies, out=out, quantize=self.quantize,
                           blend=self.blend, lr_search=self.lr_search, progress=self.progress,
                           log=print if self.progress else (lambda line: None), kept=kept, prior=self.prior,
                           **settings)
            if integers:     # auto trains on labels as text, as files hold them: the saved model gives back ints
                record_label_values(out / "model", {str(v): int(v) for v in y if v != self.out_of_scope})
        self.results_, self.out_, self.report_ = results, out, out / "report.html"
        entries = results["auto"]["candidates"]
        rows = [board_row(c) for c in entries]
        self.leaderboard_ = Leaderboard(rows)
        self.best_ = next(r for r in self.leaderboard_ if r["status"] == "winner")
        # The winner's row is scored on the shipped model_ (blended, leaned, exported as it ships)
        self.candidates_ = [(rows[i], m) for i, m in kept if rows[i] is not self.best_]
        self.model_ = load_model(out / "model", progress=False)
        self.classes_ = np.asarray(self.model_.classes_)
        return self

    def predict_proba(self, X) -> np.ndarray:
        """(N, K) probabilities over classes_, from the shipped model."""
        check_is_fitted(self, "model_")
        return self.model_.predict_proba(X)

    def predict(self, X) -> np.ndarray:
        """The class of each text (out_of_scope where the model rejects it)."""
        check_is_fitted(self, "model_")
        return np.asarray(self.model_.predict(X))

    def leaderboard(self, X=None, y=None):
        """leaderboard_ as a pandas DataFrame; given test texts X and labels y (or X a table with text and label
        columns), as AutoGluon's leaderboard(test_data): each row also with test_macro_f1 and texts_per_second
        (evaluate on X, y) for the shipped model and every candidate in candidates_, NaN for the others (their `why`
        says why), in leaderboard_'s order (best on validation first: the test score is for reading, not choosing)."""
        from headswap.data.records import table_column, table_columns

        check_is_fitted(self, "model_")
        if X is None:
            return self.leaderboard_.to_pandas()
        if y is None and table_columns(X) is not None:
            y = table_column(X, "label", "test data")
        if y is None:
            raise ConfigError("leaderboard(X, y) scores on test texts X with their labels y; y is missing")
        models = [(self.best_, self.model_)] + list(self.candidates_)
        return scored(self.leaderboard_, models, as_list(X, "test data"), as_list(y, "test data", "labels"))

    def save(self, path) -> Path:
        """The shipped model as a model folder that headswap.load_model and `headswap predict` read (files already in
        PATH that headswap did not write are kept)."""
        from headswap.saved.model_dir import save_into

        check_is_fitted(self, "model_")
        return save_into(path, lambda folder: shutil.copytree(self.out_ / "model", folder, dirs_exist_ok=True))
