import subprocess
import sys

import pytest

from headswap.cli import main
from headswap.teach.demo import run_demo


def test_short_demo_reaches_a_sane_f1():
    lines = []
    summary = run_demo(pretrain_epochs=2, epoch_scale=0.5, progress=False, log=lines.append)
    assert set(summary["results"]) == {"head-only", "partial", "full"}
    for regime, m in summary["results"].items():
        assert m["binary"]["f1"] >= 0.75, (regime, m["binary"])
        assert sum(map(sum, m["confusion_matrix"])) == 160
    trainable = {r: m["extra"]["trainable_params"] for r, m in summary["results"].items()}
    assert trainable["head-only"] < trainable["partial"] < trainable["full"]
    assert any("total demo time" in line for line in lines)


@pytest.mark.parametrize("argv, message", [
    (["demo", "--pretrain-epochs", "0"], "expected a number >= 1"),
    (["demo", "--pooling", "flatten"], "invalid choice: 'flatten'"),
    (["demo", "--epoch-scale", "abc"], "expected a number"),
    (["nonsense"], "invalid choice"),
])
def test_cli_rejects_bad_arguments_with_a_clear_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_console_command_is_installed_and_shows_help():
    out = subprocess.run([sys.executable, "-m", "headswap.cli", "demo", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--pretrain-epochs" in out.stdout
