"""What a careless caller of the Python API gets (issue 23's probe): a clear error naming the problem, never a
silently wrong answer or a tensor-size error from deep inside torch."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import make_tiny_causal, make_tiny_encoder

from headswap import TextClassifier
from headswap.errors import ConfigError, DataError
from headswap.baseline.tfidf import TfidfClassifier

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home"] * 3
LABELS = ["spam", "spam", "ham", "ham"] * 3


@pytest.fixture(scope="module")
def enc(tmp_path_factory):
    return make_tiny_encoder(tmp_path_factory.mktemp("hostile") / "enc")


@pytest.fixture(scope="module")
def fitted(enc):
    return TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0).fit(TEXTS, LABELS)


@pytest.mark.parametrize("call", ["predict", "predict_proba", "decision_function"])
def test_a_bare_string_is_refused_not_split_into_characters(fitted, call):
    with pytest.raises(DataError, match="texts must be a list, not a single str .*'hello'.*wrap it in a list"):
        getattr(fitted, call)("hello")
    assert len(getattr(fitted, call)(["hello"])) == 1


def test_fit_and_evaluate_refuse_bare_strings(enc, fitted):
    clf = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0)
    with pytest.raises(DataError, match="training data: texts must be a list"):
        clf.fit("win cash now", ["spam"] * 12)
    with pytest.raises(DataError, match="training data: labels must be a list, not a single str"):
        clf.fit(TEXTS[:2], "hs")
    with pytest.raises(DataError, match="texts must be a list"):
        fitted.evaluate("ok", ["ham", "ham"])
    with pytest.raises(DataError, match="labels must be a list"):
        fitted.evaluate(["ok", "win"], "hs")


def test_tfidf_refuses_bare_strings():
    clf = TfidfClassifier().fit(TEXTS, LABELS)
    with pytest.raises(DataError, match="texts must be a list"):
        clf.predict("hello")
    with pytest.raises(DataError, match="labels must be a list"):
        TfidfClassifier().fit(["win cash", "see you"], "sh")
    assert np.asarray(clf.predict(["win cash now"])).shape == (1,)


def test_max_length_beyond_the_models_positions(enc, tmp_path):
    with pytest.raises(ConfigError, match=r"max_length 1000 is more than .* 512 positions; use max_length <= 512"):
        TextClassifier(model=str(enc), epochs=1, progress=False, max_length=1000).fit(TEXTS, LABELS)
    TextClassifier(model=str(enc), epochs=0, progress=False, max_length=512, strategy="similarity").fit(TEXTS, LABELS)
    causal = make_tiny_causal(tmp_path / "causal")
    with pytest.raises(ConfigError, match=r"1024 positions, of which the prompt takes \d+; use max_length <= \d+"):
        TextClassifier(model=str(causal), strategy="slm-logits", epochs=0, progress=False,
                       max_length=1020).fit(TEXTS, LABELS)
