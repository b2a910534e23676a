"""benchmarks/f1_noise.py: the bootstrap of a test macro F1 from a run's confusion matrix."""

import importlib.util
from pathlib import Path

import numpy as np
from sklearn.metrics import f1_score

spec = importlib.util.spec_from_file_location("f1_noise", Path(__file__).parents[1] / "benchmarks" / "f1_noise.py")
f1_noise = importlib.util.module_from_spec(spec)
spec.loader.exec_module(f1_noise)


def test_macro_f1_from_a_confusion_matrix_is_scikit_learns():
    rng = np.random.default_rng(0)
    truth, pred = rng.integers(0, 4, 300), rng.integers(0, 3, 300)    # class 3 never predicted
    confusion = np.zeros((4, 4), int)
    np.add.at(confusion, (truth, pred), 1)
    assert f1_noise.macro_f1(confusion) == f1_score(truth, pred, average="macro", labels=range(4))


def test_the_bootstrap_spread_shrinks_with_more_test_texts():
    small = f1_noise.noise([[110, 59], [42, 290]])
    large = f1_noise.noise([[1100, 590], [420, 2900]])
    assert small[0] == large[0]
    assert small[2] < small[0] < small[3]
    assert 2.5 < small[1] / large[1] < 3.8        # sqrt(10) as many texts: about sqrt(10) times narrower
