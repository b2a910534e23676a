"""fit, predict and predict_proba take data as users hold it: lists, a pandas Series or DataFrame, a Hugging Face
datasets.Dataset, and the same seed gives the same model from each. list() of a DataFrame would have given its
column names, and of a Dataset one dict per row."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.errors import DataError

pd = pytest.importorskip("pandas")
datasets = pytest.importorskip("datasets")

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home", "urgent prize", "running late"] * 4
LABELS = ["spam", "spam", "ham", "ham", "spam", "ham"] * 4


@pytest.fixture(scope="module")
def enc(tmp_path_factory):
    return str(make_tiny_encoder(tmp_path_factory.mktemp("tables") / "enc"))


def test_lists_series_dataframe_and_dataset_train_the_same_model(enc):
    df = pd.DataFrame({"text": TEXTS, "label": LABELS})
    ds = datasets.Dataset.from_pandas(df)
    probabilities = []
    for X, y in [(TEXTS, LABELS), (df["text"], df["label"]), (df, None), (ds, None), (ds["text"], ds["label"])]:
        clf = TextClassifier(model=enc, epochs=1, progress=False, seed=0).fit(X, y)
        probabilities.append(clf.predict_proba(TEXTS))
    for p in probabilities[1:]:
        np.testing.assert_array_equal(p, probabilities[0])
    # predicting on each form gives the same rows as on the list
    for X in (df, df["text"], ds, ds["text"], np.array(TEXTS)):
        assert clf.predict(X).tolist() == clf.predict(TEXTS).tolist()


def test_a_table_without_the_text_or_label_column_is_one_line(enc):
    with pytest.raises(DataError, match=r"training data: the table has no column 'text' \(its columns: 't', "
                                        r"'label'\); name it 'text', or pass the column itself"):
        TextClassifier(model=enc, epochs=1, progress=False).fit(pd.DataFrame({"t": TEXTS, "label": LABELS}))
    with pytest.raises(DataError, match="no column 'label'"):
        TextClassifier(model=enc, epochs=1, progress=False).fit(pd.DataFrame({"text": TEXTS, "y": LABELS}))


def test_a_datasets_class_label_column_gives_its_names(enc):
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["ham", "spam"])})
    ds = datasets.Dataset.from_dict({"text": TEXTS, "label": [int(v == "spam") for v in LABELS]}, features=features)
    clf = TextClassifier(model=enc, epochs=1, progress=False, seed=0).fit(ds)
    assert clf.classes_.tolist() == ["ham", "spam"] and set(clf.predict(ds).tolist()) <= {"ham", "spam"}
    unlabelled = datasets.Dataset.from_dict({"text": TEXTS[:2], "label": [0, -1]}, features=features)
    with pytest.raises(DataError, match=r"^training data, index 1: column 'label' is -1, no class of its ClassLabel"):
        TextClassifier(model=enc, epochs=1, progress=False).fit(unlabelled)


def test_labels_mixing_integers_and_strings_or_true_and_false_are_one_line(enc, monkeypatch):
    import headswap.classifier.estimator as estimator
    monkeypatch.setattr(estimator.TextClassifier, "_build", lambda *a, **k: 1 / 0)     # refused before any build
    with pytest.raises(DataError, match=r"^training data: labels mix integers and strings \(1 at index 0, 'ham' at "
                                        r"index 2\)"):
        TextClassifier(model=enc, epochs=1, progress=False).fit(TEXTS, [1, 1, "ham", "ham", 1, "ham"] * 4)
    with pytest.raises(DataError, match=r"^training data, index 0: label True: True/False labels name no class"):
        TextClassifier(model=enc, epochs=1, progress=False).fit(TEXTS, np.array([True, True, False] * 8))
