"""Adding a strategy is one file and one registry line: a toy strategy defined here, registered from this
file, trains, saves, reloads and benchmarks through TextClassifier, the CLI and bench without any change to
the package."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tiny_models import make_tiny_encoder

from headswap import TextClassifier, strategies
from headswap.cli import main
from headswap.strategies import Build, Strategy

NAME = "toy-mean-embeddings"
X = ["win cash now", "free entry txt win", "see you at noon", "ok on my way home", "urgent you have won",
     "running late sorry"] * 4
Y = ["spam", "spam", "ham", "ham", "spam", "ham"] * 4

pytestmark = pytest.mark.usefixtures("one_thread")


class MeanEmbeddings(Strategy):
    """The model's input embeddings averaged over the text (no transformer blocks), then a linear head."""

    name = NAME
    description = "input embeddings averaged over the text, linear head (a test's toy)"

    def build(self, b: Build):
        from torch import nn

        from headswap.nn.classifier import Classifier

        class EmbeddingBody(nn.Module):
            def __init__(self, embeddings):
                super().__init__()
                self.embeddings = embeddings

            def forward(self, input_ids, attention_mask, **kw):
                return self.embeddings(input_ids)

        body = EmbeddingBody(b.base_model().get_input_embeddings())
        return Classifier(body, b.hidden, len(b.labels), pooling="mean", head="linear")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    strategies.register(MeanEmbeddings)           # the one registry line
    yield strategies.get(NAME)
    strategies.unregister(NAME)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return str(make_tiny_encoder(tmp_path_factory.mktemp("toy") / "enc"))


def test_toy_strategy_trains_saves_and_reloads(toy, encoder, tmp_path):
    clf = TextClassifier(strategy=NAME, model=encoder, epochs=2, batch_size=8, head_lr=1e-2, body_lr=1e-2,
                         progress=False).fit(X, Y)
    assert clf.regime_ == "full" and clf.trainable_params_ > 0
    proba = clf.predict_proba(X[:6])
    assert proba.shape == (6, 2)
    np.testing.assert_allclose(proba.sum(1), 1, atol=1e-6)
    clf.save(tmp_path / "m")
    again = TextClassifier.load(tmp_path / "m", progress=False)
    np.testing.assert_allclose(again.predict_proba(X[:6]), proba, atol=1e-6)


def test_toy_strategy_through_the_cli(toy, encoder, tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text("text,label\n" + "".join(f"{x},{y}\n" for x, y in zip(X, Y)))
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert NAME in "".join(capsys.readouterr().out.split())   # the help lists it (argparse wraps at hyphens)
    out = tmp_path / "model"
    assert main(["train", "--data", str(data), "--strategy", NAME, "--model", encoder, "--epochs", "1",
                 "--batch-size", "8", "--out", str(out), "-q"]) == 0
    assert json.loads((out / "headswap_config.json").read_text())["params"]["strategy"] == NAME
    capsys.readouterr()
    assert main(["predict", "--model-dir", str(out), "win a prize", "see you"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["row"] for line in lines] == [1, 2] and all(line["label"] in ("ham", "spam") for line in lines)


def test_toy_strategy_in_bench(toy, encoder, tmp_path):
    from headswap.bench.run import run_bench

    folder = tmp_path / "data"
    folder.mkdir()
    for split in ("train", "test"):
        (folder / f"{split}.csv").write_text("text,label\n" + "".join(f"{x},{y}\n" for x, y in zip(X, Y)))
    results = run_bench(folder, models=[encoder], strategies=NAME, out=tmp_path / "out", epochs=1,
                        batch_size=8, progress=False, estimate=False, log=lambda *_: None)
    rows = [r for r in results["rows"] if r["strategy"] == NAME]
    assert len(rows) == 1 and rows[0]["status"] == "ok", rows
    assert rows[0]["regime"] == "full" and 0 <= rows[0]["macro_f1"] <= 1
    assert NAME in (tmp_path / "out" / "results.md").read_text()
