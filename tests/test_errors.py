"""User-facing errors are HeadswapErrors: one line naming the problem, from Python and the command line,
before any training starts."""

from __future__ import annotations

import pytest
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.cli import main
from headswap.errors import ConfigError

X = ["win cash now", "free entry txt win", "see you at noon", "ok on my way home"] * 3
Y = ["spam", "spam", "ham", "ham"] * 3

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return str(make_tiny_encoder(tmp_path_factory.mktemp("err") / "enc"))


@pytest.mark.parametrize("settings, message", [
    ({"regime": "partial", "last_n": 99}, "last_n must be between 1 and 2"),
    ({"pooling": "bogus"}, "unknown pooling 'bogus'"),
    ({"head": "bogus"}, "unknown head 'bogus'"),
    ({"strategy": "slm-logits"}, "needs a causal language model"),
    ({"strategy": "bogus"}, "unknown strategy 'bogus'"),
    ({"head_lr": -1.0}, "head_lr: expected a number > 0"),
    ({"epochs": 1.5}, "epochs must be a whole number"),
    ({"strategy": "encoder-mlp", "epochs": 0}, "cannot run zero-shot"),
    ({"lora_dropout": 1.0}, "lora_dropout: expected a number < 1"),
])
def test_python_errors_name_the_setting(encoder, settings, message):
    with pytest.raises(ConfigError, match=message):
        TextClassifier(model=encoder, epochs=settings.pop("epochs", 1), progress=False, **settings).fit(X, Y)


@pytest.mark.parametrize("flags, message", [
    (["--regime", "partial", "--last-n", "99"], "has 2 blocks; the partial regime trains 1 to 2"),
    (["--strategy", "slm-logits"], "needs a causal language model"),
    (["--pooling", "bogus"], "--pooling: invalid choice: 'bogus'"),
    (["--head-lr", "-1"], "--head-lr: expected a number > 0, got -1"),
    (["--lora-r", "0"], "--lora-r: expected a number >= 1, got 0"),
    (["--metric", "f1"], None),                      # two classes: f1 is fine
    (["--metric", "bogus"], "--metric: invalid choice: 'bogus'"),
    (["--warmup-ratio", "nan"], "--warmup-ratio: expected a finite number"),
])
def test_cli_errors_are_one_line_before_training(encoder, tmp_path, capsys, flags, message):
    data = tmp_path / "d.csv"
    data.write_text("text,label\n" + "".join(f"{x},{y}\n" for x, y in zip(X, Y)))
    argv = ["train", "--data", str(data), "--model", encoder, "--epochs", "1", "--out", str(tmp_path / "m"),
            "-q", *flags]
    if message is None:
        assert main(argv) == 0
        return
    try:
        rc = main(argv)
    except SystemExit as e:        # argparse rejects the value itself
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if "error" in line]) == 1
    assert not (tmp_path / "m").exists()            # nothing trained, nothing saved


def test_binary_metric_on_multiclass_data_is_refused_before_training(encoder, tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text("text,label\n" + "".join(f"{x},{c}\n" for x, c in zip(X, "abc" * 4)))
    assert main(["train", "--data", str(data), "--model", encoder, "--out", str(tmp_path / "m"), "-q",
                 "--metric", "f1"]) == 2
    assert "use macro_f1" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
