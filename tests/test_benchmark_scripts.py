"""benchmarks/active_learning.py takes data of one's own (--data) and writes only under its --out: its default plot
used to overwrite docs/img/active_learning.png in the checkout. Fast: features are seeded into the cache, so no
model loads."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("active_learning", ROOT / "benchmarks" / "active_learning.py")
active_learning = importlib.util.module_from_spec(spec)
spec.loader.exec_module(active_learning)


def files_under(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_active_learning_reads_a_folder_of_ones_own_and_writes_only_under_out(tmp_path):
    data, out = tmp_path / "tickets", tmp_path / "out"
    data.mkdir()
    for name in ("train.csv", "test.csv"):
        (data / name).write_text("text,label\nx,a\n")    # read for its name: the features below stand for it
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 8)) * 3

    def draw(n):
        y = np.arange(n) % 3
        return (centres[y] + rng.normal(size=(n, 8))).astype(np.float32), y
    pool_x, pool_y = draw(120)
    test_x, test_y = draw(60)
    (out / "features").mkdir(parents=True)
    np.savez(out / "features" / "tickets.npz", pool_x=pool_x, pool_y=pool_y, test_x=test_x, test_y=test_y,
             classes=np.array(["a", "b", "c"]), feature_seconds=np.array(0.0), pool_texts=np.array(["t"] * 120))
    checkout = {d: files_under(ROOT / d) for d in ("docs", "benchmarks/results")}

    assert active_learning.main(["--data", str(data), "--out", str(out), "--seeds", "0", "--strategies", "random",
                                 "margin", "--batch", "12", "--budget", "30"]) == 0
    assert {d: files_under(ROOT / d) for d in checkout} == checkout, "the benchmark wrote into the checkout"
    assert set(files_under(out)) == {"features/tickets.npz", "tickets.json", "active_learning.png"}
    doc = json.loads((out / "tickets.json").read_text())
    assert doc["test"] == "tickets/test.csv" and {r["strategy"] for r in doc["runs"]} == {"random", "margin"}
    assert doc["runs"][0]["labels"] == [6, 18, 30]       # 2 a class first (a folder of one's own), then rounds of 12


def test_active_learning_refuses_a_folder_without_its_files(tmp_path):
    with pytest.raises(SystemExit) as e:
        active_learning.main(["--data", str(tmp_path), "--out", str(tmp_path / "out")])
    assert "not a built-in set" in str(e.value) and not (tmp_path / "out").exists()
