"""benchmarks/active_learning.py and benchmarks/tfidf_search.py take data of one's own (--data) and write only
under their --out: active_learning's default plot used to overwrite docs/img/active_learning.png in the checkout.
Fast: active learning's features are seeded into the cache, so no model loads."""

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


def test_tfidf_search_measures_a_folder_of_ones_own_and_writes_only_under_out(tmp_path):
    spec = importlib.util.spec_from_file_location("tfidf_search", ROOT / "benchmarks" / "tfidf_search.py")
    tfidf_search = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tfidf_search)
    data, out = tmp_path / "tickets", tmp_path / "out"
    data.mkdir()
    topics = {"bill": "invoice charge refund payment", "bug": "crash error broken freeze"}
    rows = [f"my {words.split()[i % 4]} again {i},{label}\n" for i in range(30) for label, words in topics.items()]
    (data / "train.csv").write_text("text,label\n" + "".join(rows))
    checkout = {d: files_under(ROOT / d) for d in ("docs", "benchmarks/results")}
    assert tfidf_search.main(["--data", str(data), "--out", str(out), "--budget", "600"]) == 0
    assert {d: files_under(ROOT / d) for d in checkout} == checkout, "the benchmark wrote into the checkout"
    assert set(files_under(out)) == {"tfidf_search.json"}
    doc = json.loads((out / "tfidf_search.json").read_text())
    (row,) = doc["sets"]
    assert (row["train"], row["validation"], row["test"], row["classes"]) == (54, 6, 0, 2)    # a tenth held out
    assert row["tuned"]["tried"][0]["validation_macro_f1"] == row["plain"]["validation_macro_f1"]
    assert doc["search_seconds"] == 30.0 and len(doc["load_before"]) == 3
    with pytest.raises(SystemExit, match="neither a folder with train.csv"):
        tfidf_search.main(["--data", str(tmp_path / "none"), "--out", str(out)])


def test_candidates_on_test_scores_every_kept_candidate_on_the_file_it_names(tmp_path):
    """A folder with train.csv and validation.csv, scored on validation.csv (as for CLINC150): auto holds a tenth of
    train out instead, and the leaderboard's test column is each candidate's macro F1 on validation.csv."""
    from tiny_models import make_tiny_encoder
    spec = importlib.util.spec_from_file_location("candidates_on_test", ROOT / "benchmarks" / "candidates_on_test.py")
    candidates_on_test = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(candidates_on_test)
    enc = make_tiny_encoder(tmp_path / "enc")
    data, out = tmp_path / "tickets", tmp_path / "out"
    data.mkdir()
    topics = {"bill": "invoice charge refund payment", "bug": "crash error broken freeze"}
    for name, n in (("train.csv", 30), ("validation.csv", 8)):
        rows = [f"my {words.split()[i % 4]} again {i},{label}\n" for i in range(n) for label, words in topics.items()]
        (data / name).write_text("text,label\n" + "".join(rows))
    assert candidates_on_test.main(["--data", str(data), "--test", "validation.csv", "--budget", "30s", "--models",
                                    str(enc), "--prior", "none", "--out", str(out)]) == 0
    doc = json.loads((out / "leaderboard.json").read_text())
    run = json.loads((out / "run" / "results.json").read_text())
    assert run["meta"]["data"]["validation"]["rows"] == 6         # a tenth of train.csv, not validation.csv
    scored = [r for r in doc["rows"] if r["test_macro_f1"] is not None]
    assert {r["model"] for r in scored} >= {"tfidf"} and len(scored) >= 2, doc["rows"]
    assert all(0 <= r["test_macro_f1"] <= 1 for r in scored)
    assert candidates_on_test.main(["--data", str(data), "--test", "nope.csv", "--out", str(out)]) == 2
