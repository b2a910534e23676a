"""CLI errors: one clear line, exit code 2, never a traceback."""

import subprocess
import sys

import pytest


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "headswap.cli", *args], capture_output=True, text=True, input=stdin)


def test_train_help_lists_every_strategy():
    from headswap.strategies import names
    out = run("train", "--help").stdout
    for name in names():
        assert name in out


def test_building_the_parser_imports_no_torch():
    """`headswap --help` (and each command's --help) must answer at once: no command's arguments may pull in
    torch, numpy-heavy modules or the models."""
    code = ("import sys; from headswap.cli.parser import build_parser; build_parser(); "
            "print(sorted(m for m in ('torch', 'transformers', 'onnxruntime', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("args, message", [
    (["train", "--data", "nope.csv", "--out", "{tmp}/x"], "nope.csv: no such file"),
    (["train", "--data", "{csv}", "--out", "{tmp}/x", "--strategy", "bogus"], "invalid choice: 'bogus'"),
    (["train", "--data", "{csv}", "--out", "{tmp}/x", "--model", "bert-base-uncased"], "offline"),
    (["train", "--data", "{csv}", "--out", "{tmp}/x", "--epochs", "-1"], "--epochs: expected a number >= 0"),
    (["train", "--data", "{bad}", "--out", "{tmp}/x"], "label"),
    (["eval", "--model-dir", "{tmp}", "--data", "{csv}"], "not a saved headswap model"),
    (["predict", "--model-dir", "{tmp}", "hello"], "not a saved headswap model"),
    (["eval", "--model-dir", "{tmp}", "--data", "{only_val}"], "has no test.csv"),
    (["eval", "--model-dir", "{tmp}", "--data", "{only_train}"], "has no test.csv"),
    (["train", "--data", "{csv}", "--out", "{tmp}/x", "--model", "{broken_config}"], "cannot be read as JSON"),
    (["train", "--data", "{csv}", "--out", "{tmp}/x", "--model", "{no_weights}"], "no weights"),
    (["train", "--data", "{csv}", "--out", "{tmp}/x", "--checkpoint-every", "-2"], "--checkpoint-every: expected"),
    (["train", "--data", "{csv}", "--out", "{tmp}/x", "--group-by-length", "yes"], "unrecognized arguments: yes"),
])
def test_cli_errors_are_one_clear_line(tmp_path, args, message):
    csv = tmp_path / "d.csv"
    csv.write_text("text,label\n" + "".join(f"msg {i},{'a' if i % 2 else 'b'}\n" for i in range(10)))
    bad = tmp_path / "bad.csv"
    bad.write_text("text,labl\nhello,a\n")
    folders = {}
    for name, files in {"only_val": ["validation.csv"], "only_train": ["train.csv"],
                        "broken_config": ["config.json"], "no_weights": ["config.json"]}.items():
        folders[name] = tmp_path / name
        folders[name].mkdir()
        for f in files:
            (folders[name] / f).write_text(csv.read_text())
    (folders["broken_config"] / "model.safetensors").write_bytes(b"")
    (folders["no_weights"] / "config.json").write_text('{"model_type": "bert"}')
    args = [a.format(csv=csv, bad=bad, tmp=tmp_path, **folders) for a in args]
    r = run(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_zero_shot_train_saves_a_model_without_training(tmp_path):
    """epochs 0 builds no Accelerator; the main-process check must still work."""
    import sys as _sys
    _sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from tiny_models import make_tiny_causal

    model = make_tiny_causal(tmp_path / "cau")
    csv = tmp_path / "d.csv"
    csv.write_text("text,label\n" + "".join(f"msg {i},{'a' if i % 2 else 'b'}\n" for i in range(10)))
    r = run("train", "--data", str(csv), "--strategy", "slm-letters", "--model", str(model), "--epochs", "0",
            "--out", str(tmp_path / "m"), "-q")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m" / "headswap_config.json").is_file()


def test_quiet_train_with_resume_still_says_where_it_starts(tmp_path):
    """-q hides progress and epoch lines, not the checkpoint/resume decision."""
    import sys as _sys
    _sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from tiny_models import make_tiny_encoder

    model = make_tiny_encoder(tmp_path / "enc")
    csv = tmp_path / "d.csv"
    csv.write_text("text,label\n" + "".join(f"msg {i},{'a' if i % 2 else 'b'}\n" for i in range(24)))
    r = run("train", "--data", str(csv), "--model", str(model), "--epochs", "1", "--out", str(tmp_path / "m"),
            "--resume", "-q")
    assert r.returncode == 0, r.stderr
    assert "no checkpoint in" in r.stderr and "training starts from scratch" in r.stderr
    assert "epoch 1/1:" not in r.stderr
