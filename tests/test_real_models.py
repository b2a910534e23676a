"""End-to-end checks on the real built-in models and the real SMS data (slow: run by make test and CI)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from headswap import TextClassifier, load_dataset
from headswap.data.sampling import stratified_split

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sms():
    path = SHARED / "sms_spam" / "train.csv"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    data = load_dataset(path)
    small, _ = stratified_split(data, test_size=1 - 120 / len(data), seed=0)
    train, test = stratified_split(small, test_size=0.33, seed=1)
    return train, test


def test_minilm_encoder_mlp_learns_spam_and_reloads(sms, tmp_path):
    train, test = sms
    clf = TextClassifier(strategy="encoder-mlp", model="minilm", epochs=2, batch_size=16, progress=False,
                         eval_fraction=0)
    clf.fit(train.texts, train.labels)
    m = clf.evaluate(test.texts, test.labels)
    assert m.accuracy >= 0.85, m.report()
    clf.save(tmp_path / "m")
    again = TextClassifier.load(tmp_path / "m", progress=False)
    np.testing.assert_allclose(again.predict_proba(test.texts[:8]), clf.predict_proba(test.texts[:8]), atol=1e-6)


def test_smollm2_slm_logits_zero_shot_then_lora(sms, tmp_path):
    train, test = sms
    zero = TextClassifier(strategy="slm-logits", model="smollm2-135m", epochs=0, progress=False)
    zero.fit(train.texts, train.labels)
    p0 = zero.predict_proba(test.texts[:6])
    assert p0.shape == (6, 2) and np.allclose(p0.sum(1), 1, atol=1e-5)
    # The answer tokens are real, distinct vocabulary ids, and the sliced head is K x hidden.
    assert len(set(zero.answer_token_ids_)) == 2
    assert tuple(zero.module_.head.weight.shape) == (2, 576)
    # The prompt's shared prefix runs once, from the KV cache: a silent fallback to the uncached body
    # (as a renamed cache argument in transformers 5.x once caused) costs 3x and is a failure.
    from headswap.nn.prefix_cache import PrefixCachedBody
    assert isinstance(zero.module_.body, PrefixCachedBody) and not zero.encoder_.include_prefix

    clf = TextClassifier(strategy="slm-logits", model="smollm2-135m", regime="lora", epochs=1, batch_size=8,
                         progress=False, eval_fraction=0, max_length=48)
    clf.fit(train.texts[:32], train.labels[:32])
    assert clf.trainable_params_ > 0 and clf.trainable_params_ < 5_000_000  # adapters only
    clf.save(tmp_path / "slm")
    again = TextClassifier.load(tmp_path / "slm", progress=False)
    np.testing.assert_allclose(again.predict_proba(test.texts[:6]), clf.predict_proba(test.texts[:6]), atol=1e-6)


def test_cli_train_eval_predict_on_real_data(tmp_path):
    data = SHARED / "sms_spam"
    if not data.is_dir():
        pytest.skip("shared data not present")
    run = lambda *a: subprocess.run([sys.executable, "-m", "headswap.cli", *a], capture_output=True, text=True)  # noqa: E731
    out = tmp_path / "model"
    r = run("train", "--data", str(data / "train.csv"), "--strategy", "encoder-mlp", "--model", "minilm",
            "--epochs", "1", "--train-limit", "80", "--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    assert (out / "model.safetensors").is_file() and (out / "README.md").is_file()
    r = run("eval", "--model-dir", str(out), "--data", str(data / "test.csv"), "--limit", "60", "-q")
    assert r.returncode == 0, r.stderr
    evaluated = tmp_path / "model-eval"                  # beside the model, not inside it
    metrics = json.loads((evaluated / "metrics.json").read_text())
    assert metrics["n"] == 60 and "confusion_matrix" in metrics
    assert (evaluated / "confusion_matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = run("predict", "--model-dir", str(out), "WINNER!! claim your free prize now, txt 80082", "see you at 6")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["text"] for row in rows] == ["WINNER!! claim your free prize now, txt 80082", "see you at 6"]
    assert all(abs(sum(row["probabilities"].values()) - 1) < 1e-4 for row in rows)
