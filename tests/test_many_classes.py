"""Many classes on the terminal (issue 33): `train` named every class on one line (120 KB for 10,000 classes) and
`train`/`eval` printed the whole confusion matrix (151 x 151 for CLINC150). Above 20 classes they print the first
names and a count, and the most-confused pairs with the path of the confusion-matrix PNG."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tiny_models import make_tiny_encoder

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("k", [20, 25])
def test_train_and_eval_print_a_short_summary_above_20_classes(tmp_path, k):
    enc = make_tiny_encoder(tmp_path / "enc")
    rows = "text,label\n" + "".join(f"word{i} text{j},class_{i:02d}\n" for i in range(k) for j in range(2))
    (tmp_path / "d.csv").write_text(rows)
    r = subprocess.run([sys.executable, "-m", "headswap.cli", "train", "--data", str(tmp_path / "d.csv"),
                        "--test-data", str(tmp_path / "d.csv"), "--model", str(enc), "--epochs", "1",
                        "--eval-fraction", "0", "--out", str(tmp_path / "m"), "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    started = next(x for x in r.stderr.splitlines() if x.startswith("training "))
    names = ", ".join(f"class_{i:02d}" for i in range(k))
    assert started.endswith(f"{k} classes: {names}" if k <= 20 else
                            f"{k} classes: {', '.join(f'class_{i:02d}' for i in range(8))}, ... and {k - 8} more")
    e = subprocess.run([sys.executable, "-m", "headswap.cli", "eval", "--model-dir", str(tmp_path / "m"), "--data",
                        str(tmp_path / "d.csv"), "--out", str(tmp_path / "e"), "-q"], capture_output=True, text=True)
    assert e.returncode == 0, e.stderr
    for out in (r.stdout, e.stdout):
        assert ("confusion matrix (rows = true" in out) == (k <= 20), out
        assert ("most confused" in out) == (k > 20), out
    if k > 20:
        assert f"the whole confusion matrix: {tmp_path / 'e' / 'confusion_matrix.png'}" in e.stdout
        assert (tmp_path / "e" / "confusion_matrix.png").is_file()
