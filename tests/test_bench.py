"""headswap bench: planning, stratified subsets, the end-to-end run on tiny random models, and its files."""

from __future__ import annotations

import argparse
import csv
import json
from collections import Counter
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch
from tiny_models import make_tiny_causal, make_tiny_encoder

from headswap.bench.baseline import BASELINE_STRATEGY
from headswap.trials.measure import estimate_seconds
from headswap.trials.plan import PlannedRow, load_bench_data, parse_strategies, plan_bench, validation_limit
from headswap.bench.run import classifier_for, run_bench, run_model_row
from headswap.data.load import LabelledData, from_lists
from headswap.data.sampling import stratified_subset
from headswap.errors import ConfigError, DataError
from headswap.metrics import metrics_from_predictions
from headswap.reports.plots import plot_confusion, plot_learning_curves, plot_quality_vs_speed
from headswap.strategies import names

STRATEGIES = names()

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SPAM = ["win cash now call this number", "free entry txt win to claim your prize", "urgent you have won"]
HAM = ["see you at noon", "call me when you are free", "running late sorry", "ok on my way home"]


def _write_split(path: Path, n: int, offset: int = 0) -> None:
    """n texts, a third spam, grouped by class like the real (unshuffled) CSVs."""
    rows = [(f"{SPAM[i % len(SPAM)]} {offset + i}", "spam") for i in range(n // 3)]
    rows += [(f"{HAM[i % len(HAM)]} {offset + i}", "ham") for i in range(n - n // 3)]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def _assert_png(path: Path) -> None:
    assert path.is_file(), path
    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 0 and image.shape[1] > 0


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    torch.manual_seed(0)
    enc = make_tiny_encoder(root / "tiny-enc")
    cau = make_tiny_causal(root / "tiny-causal")
    data = root / "data"
    data.mkdir()
    _write_split(data / "train.csv", 40)
    _write_split(data / "test.csv", 21, offset=100)
    return root, str(enc), str(cau), data


@pytest.fixture(scope="module")
def bench_run(tiny_dirs):
    root, enc, cau, data = tiny_dirs
    logs: list[str] = []
    results = run_bench(data, models=[enc, cau], strategies="encoder-mlp,slm-logits", epochs=1,
                        out=root / "out", progress=False, log=logs.append)
    return results, root / "out", logs


def _row(rows, strategy, regime=None):
    found = [r for r in rows if r["strategy"] == strategy and (regime is None or r["regime"] == regime)]
    assert len(found) == 1, [(r["strategy"], r["regime"]) for r in rows]
    return found[0]


# ---- end to end ---------------------------------------------------------------------------------------------------


def test_results_json(bench_run):
    results, out, _ = bench_run
    saved = json.loads((out / "results.json").read_text())
    rows = saved["rows"]
    assert [(r["strategy"], r["regime"]) for r in rows] == [
        (BASELINE_STRATEGY, "baseline"), ("encoder-mlp", "full"), ("slm-logits", "lora"), ("slm-logits", "zero-shot")]
    for r in rows:
        assert r["status"] == "ok", r.get("error")
        assert isinstance(r["macro_f1"], float) and 0.0 <= r["macro_f1"] <= 1.0
        assert 0.0 <= r["weighted_f1"] <= 1.0 and 0.0 <= r["accuracy"] <= 1.0
        assert set(r["f1_per_class"]) == {"ham", "spam"}
        assert np.array(r["confusion"]).sum() == 21
        assert r["texts_per_second"] > 0
        assert r["peak_rss_mb"] is not None and r["peak_rss_delta_mb"] >= 0
        assert r["process_maxrss_mb"] >= r["peak_rss_mb"] - 1
    assert _row(rows, BASELINE_STRATEGY)["baseline"] is True

    enc_row = _row(rows, "encoder-mlp")
    assert enc_row["trainable_params"] == enc_row["effective_params"] > 0   # full regime: everything trains
    assert enc_row["forward_passes_per_text"] == 1.0
    assert enc_row["history"][0]["epoch"] == 1 and 0.0 <= enc_row["history"][0]["score"] <= 1.0
    lora = _row(rows, "slm-logits", "lora")
    assert 0 < lora["trainable_params"] < lora["effective_params"]
    assert lora["tied_embeddings"] is True and lora["embedding_params"] < lora["effective_params"]
    zero = _row(rows, "slm-logits", "zero-shot")
    assert zero["epochs"] == 0 and zero["trainable_params"] == 0 and zero["history"] == []
    # zero-shot rows carry no LoRA adapters: the sliced head and body only
    assert zero["effective_params"] == lora["effective_params"] - lora["trainable_params"]

    meta = saved["meta"]
    assert meta["date"] and meta["machine"]["cpu_count"] and meta["machine"]["torch_threads"] == 1
    assert meta["args"]["strategies"] == ["encoder-mlp", "slm-logits"] and meta["args"]["epochs"] == 1
    assert meta["data"]["train"]["used"] == 40 and meta["data"]["test"]["used"] == 21
    assert meta["data"]["validation"]["file"] is None
    skipped = {(Path(s["model"]).name, s["strategy"]) for s in saved["skipped"]}
    assert skipped == {("tiny-enc", "slm-logits"), ("tiny-causal", "encoder-mlp")}
    assert results["rows"][1]["macro_f1"] == rows[1]["macro_f1"]


def test_results_markdown(bench_run):
    _, out, _ = bench_run
    md = (out / "results.md").read_text()
    assert "| # | model | strategy | regime | macro F1 |" in md
    for name in ("encoder-mlp", "slm-logits", BASELINE_STRATEGY, "zero-shot", "**baseline**"):
        assert name in md
    assert "## F1 per class" in md and "| ham | spam |" in md
    assert "## Skipped combinations" in md and "needs a causal language model" in md
    table = [line for line in md.splitlines() if line.startswith("| ") and line[2:3].isdigit()]
    f1s = [float(line.split("|")[5]) for line in table]
    assert len(table) == 4 and f1s == sorted(f1s, reverse=True)


def test_png_files(bench_run):
    results, out, _ = bench_run
    names = ["learning_curves.png", "quality_vs_speed.png"] + [r["confusion_png"] for r in results["rows"]]
    assert "confusion-tiny-enc-encoder-mlp-full.png" in names
    assert "confusion-tiny-causal-slm-logits-zero-shot.png" in names
    assert len(set(names)) == len(names) == 6
    for name in names:
        _assert_png(out / name)
    assert not list(out.glob("*.tmp"))


def test_report_html(bench_run):
    from test_html_report import Page

    results, out, _ = bench_run
    html = (out / "report.html").read_text(encoding="utf-8")
    page = Page(html)
    assert page.sections == ["summary", "results", "quality-vs-speed", "learning-curves", "confusion", "calibration",
                             "skipped"]
    assert "http://" not in html and "https://" not in html
    assert [cells[2] for _, cells in page.body_rows("results")[:4]] == [
        r["strategy"] for r in sorted(results["rows"], key=lambda r: -r["macro_f1"])]
    calibrated = sum(bool(r.get("calibration")) for r in results["rows"])
    assert calibrated == 3      # the model rows; the LinearSVC baseline has no probabilities
    assert len(page.images) == 2 + 4 + calibrated and all(src.startswith("data:image/png;base64,") for _, src, _ in page.images)
    assert "needs a causal language model" in page.text["skipped"]


def test_logs_estimate_each_row(bench_run):
    _, _, logs = bench_run
    text = "\n".join(logs)
    assert text.count("estimated") >= 3       # before each model row (and again in the after-row summary)
    assert "[2/4] tiny-enc · encoder-mlp · full: estimated" in text
    assert "skip tiny-enc · slm-logits" in text
    assert "report.html" in logs[-1]


# ---- planning and mismatches --------------------------------------------------------------------------------------


def test_plan_runs_each_strategy_only_on_models_it_fits():
    kinds = {"enc": "encoder", "lm": "causal"}
    rows, skipped = plan_bench(kinds, list(STRATEGIES), epochs=2)
    planned = {(r.model, r.strategy, r.regime) for r in rows}
    assert ("enc", "encoder-mlp", "full") in planned and ("enc", "cross-encoder", "full") in planned
    assert ("lm", "slm-logits", "lora") in planned and ("lm", "slm-logits", "zero-shot") in planned
    assert ("enc", "similarity", "full") in planned and ("lm", "similarity", "full") in planned
    assert ("enc", "similarity", "zero-shot") in planned and ("lm", "similarity", "zero-shot") in planned
    assert not any(m == "enc" and s in ("slm-logits", "generate-parse", "causal-embedding-mlp") for m, s, _ in planned)
    assert not any(m == "lm" and s in ("encoder-mlp", "cross-encoder") for m, s, _ in planned)
    reasons = {(s["model"], s["strategy"]): s["reason"] for s in skipped}
    assert "needs a causal language model" in reasons[("enc", "slm-logits")]
    assert "encoders only" in reasons[("lm", "cross-encoder")]
    assert all(r.epochs == (0 if r.regime == "zero-shot" else 2) for r in rows)


def test_plan_skips_the_strategies_that_cannot_chunk_when_chunking():
    kinds = {"enc": "encoder", "lm": "causal"}
    rows, skipped = plan_bench(kinds, list(STRATEGIES), epochs=1, chunking=True)
    from headswap.strategies import get
    assert rows and all(get(r.strategy).chunkable for r in rows)
    reasons = {(s["model"], s["strategy"]): s["reason"] for s in skipped}
    assert "cannot chunk" in reasons[("enc", "cross-encoder")] and "cannot chunk" in reasons[("lm", "slm-logits")]
    assert ("enc", "encoder-mlp") not in reasons
    assert {(r.model, r.strategy) for r in plan_bench(kinds, list(STRATEGIES), epochs=1)[0]} > {
        (r.model, r.strategy) for r in rows}


def test_plan_zero_shot_switches():
    kinds = {"lm": "causal"}
    rows, _ = plan_bench(kinds, ["slm-logits", "slm-hidden-mlp"], epochs=1, zero_shot=False)
    assert [(r.strategy, r.regime) for r in rows] == [("slm-logits", "lora"), ("slm-hidden-mlp", "lora")]
    rows, skipped = plan_bench(kinds, ["slm-logits", "slm-hidden-mlp"], epochs=0)
    assert [(r.strategy, r.regime) for r in rows] == [("slm-logits", "zero-shot")]
    assert skipped[0]["strategy"] == "slm-hidden-mlp" and "no zero-shot form" in skipped[0]["reason"]
    rows, skipped = plan_bench(kinds, ["generate-parse"], epochs=1, regime="head-only")
    assert [r.regime for r in rows] == ["zero-shot"] and "head-only" in skipped[0]["reason"]


def test_parse_strategies():
    assert parse_strategies("all") == [s for s in STRATEGIES if s != "setfit"]
    assert parse_strategies("all,setfit")[-1] == "setfit"
    assert parse_strategies("slm-logits,encoder-mlp") == ["slm-logits", "encoder-mlp"]
    assert parse_strategies(["similarity", "encoder-mlp,similarity"]) == ["similarity", "encoder-mlp"]
    with pytest.raises(ConfigError, match="unknown strategy 'nope'"):
        parse_strategies("encoder-mlp,nope")


def test_mismatch_only_run_records_skips(tiny_dirs, tmp_path):
    _, enc, _, data = tiny_dirs
    results = run_bench(data, models=[enc], strategies=["slm-logits"], epochs=1, out=tmp_path, progress=False,
                        log=lambda _msg: None)
    assert [r["strategy"] for r in results["rows"]] == [BASELINE_STRATEGY]
    assert results["skipped"] == [{"model": enc, "strategy": "slm-logits",
                                   "reason": "slm-logits needs a causal language model; this model is an encoder"}]
    md = (tmp_path / "results.md").read_text()
    assert "tiny-enc · slm-logits: slm-logits needs a causal language model" in md
    _assert_png(tmp_path / "learning_curves.png")       # empty chart, still a valid PNG


def test_a_logistic_head_is_timed_and_runs(tiny_dirs, tmp_path):
    # its probe once failed while formatting a missing time limit, and the row was recorded as failed
    _, enc, _, data = tiny_dirs
    logs = []
    results = run_bench(data, models=[enc], strategies="encoder-mlp", regime="head-only", head="linear",
                        head_fit="logistic", zero_shot=False, train_limit=40, test_limit=10, out=tmp_path,
                        progress=False, log=logs.append)
    row = [r for r in results["rows"] if r["strategy"] == "encoder-mlp"][0]
    assert row["status"] == "ok" and row["estimated_seconds"] > 0, row
    assert any("tiny-enc · encoder-mlp · head-only: estimated" in line for line in logs), logs


def test_failing_row_is_recorded(tiny_dirs):
    _, enc, _, data = tiny_dirs
    bench_data = load_bench_data(data, train_limit=20, test_limit=10)
    row = run_model_row(PlannedRow(enc, "encoder", "encoder-mlp", "no-such-regime", 1), bench_data,
                        dict(seed=0, batch_size=8, max_length=32, progress=False))
    assert row["status"] == "error"
    assert row["error"].startswith("ConfigError: unknown regime 'no-such-regime'")
    assert "macro_f1" not in row and row["wall_seconds"] >= 0


def test_interrupted_run_keeps_finished_rows(tiny_dirs, tmp_path, monkeypatch):
    import headswap.bench.run as bench

    _, enc, _, data = tiny_dirs

    def interrupt(*_args, **_kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "run_model_row", interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_bench(data, models=[enc], strategies="encoder-mlp", out=tmp_path, progress=False, estimate=False,
                  log=lambda _msg: None)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["meta"]["interrupted"] is True
    assert [r["strategy"] for r in saved["rows"]] == [BASELINE_STRATEGY]
    assert BASELINE_STRATEGY in (tmp_path / "results.md").read_text()


def test_estimate_extrapolates_the_probe():
    probe = {"load_seconds": 2.0, "train_batch_seconds": 0.5, "train_startup_seconds": 1.0,
             "inference_seconds_per_text": 0.01}
    # 100 texts, no validation.csv: 90 train in 6 batches of 16 and 10 held out, per epoch
    est = estimate_seconds(probe, epochs=2, n_train=100, n_validation=None, n_test=50, batch_size=16)
    assert est["train"] == pytest.approx(1.0 + 2 * (6 * 0.5 + 10 * 0.01))
    assert est["test"] == pytest.approx(0.5) and est["texts_per_second"] == pytest.approx(100)
    assert est["total"] == pytest.approx(2.0 + est["train"] + 0.5)
    zero = estimate_seconds(probe, epochs=0, n_train=100, n_validation=None, n_test=50, batch_size=16)
    assert zero["train"] == 0 and zero["total"] == pytest.approx(2.5)


# ---- data subsets -------------------------------------------------------------------------------------------------


def _grouped(n_a: int, n_b: int, n_c: int = 0) -> LabelledData:
    labels = ["a"] * n_a + ["b"] * n_b + ["c"] * n_c      # grouped by class, like an unshuffled CSV
    return from_lists([f"text {i}" for i in range(len(labels))], labels)


def test_stratified_subset_is_stratified_and_deterministic():
    data = _grouped(120, 60)
    sub = stratified_subset(data, 30, seed=0)
    assert Counter(sub.labels) == {"a": 20, "b": 10}
    assert sub.texts == stratified_subset(data, 30, seed=0).texts
    assert sub.texts != stratified_subset(data, 30, seed=1).texts
    assert sub.texts != data.texts[:30]                       # not the first rows
    assert sub.rows == sorted(sub.rows)                      # file order kept
    assert all(data.texts[r - 1] == t for r, t in zip(sub.rows, sub.texts))
    assert stratified_subset(data, None) is data and stratified_subset(data, 500) is data


def test_stratified_subset_keeps_rare_classes():
    data = _grouped(95, 4, 1)
    sub = stratified_subset(data, 10, seed=0)
    assert len(sub) == 10 and set(sub.labels) == {"a", "b", "c"}
    with pytest.raises(ConfigError):
        stratified_subset(data, 0)


def test_load_bench_data_limits_and_validation(tmp_path):
    _write_split(tmp_path / "train.csv", 90)
    _write_split(tmp_path / "test.csv", 30)
    _write_split(tmp_path / "validation.csv", 300)
    data = load_bench_data(tmp_path, train_limit=30, test_limit=12, seed=3)
    assert Counter(data.train.labels) == {"spam": 10, "ham": 20}
    assert Counter(data.test.labels) == {"spam": 4, "ham": 8}
    assert len(data.validation) == 200 == validation_limit(300, 30)
    assert data.sizes["validation"]["rows"] == 300 and data.sizes["validation"]["used"] == 200
    assert validation_limit(300, None) == 300 and validation_limit(2000, 5000) == 1000
    only_train = tmp_path / "only-train"
    only_train.mkdir()
    _write_split(only_train / "train.csv", 10)
    with pytest.raises(DataError, match="test.csv is missing"):
        load_bench_data(only_train)
    with pytest.raises(DataError, match="does not exist"):
        load_bench_data(tmp_path / "nowhere")


# ---- plots and command line ---------------------------------------------------------------------------------------


def test_plot_confusion_standalone(tmp_path):
    _assert_png(plot_confusion([[5, 1, 0], [2, 7, 1], [0, 0, 4]], ["joy", "sadness", "surprise"],
                               tmp_path / "matrix.png", "from a matrix"))
    m = metrics_from_predictions([0, 0, 1, 1], [0, 1, 1, 1], ["ham", "spam"])
    _assert_png(plot_confusion(m, None, tmp_path / "sub" / "metrics.png", "from Metrics"))
    with pytest.raises(ValueError, match="labels"):
        plot_confusion([[1, 0], [0, 1]], ["a", "b", "c"], tmp_path / "bad.png")


def test_plots_tolerate_failed_and_multi_epoch_rows(tmp_path):
    rows = [{"model_name": "m", "strategy": "s", "regime": "full", "status": "ok", "macro_f1": 0.8,
             "texts_per_second": 120.0, "history": [{"epoch": 1, "score": 0.5}, {"epoch": 2, "score": 0.7}]},
            {"model_name": "t", "strategy": "tfidf", "regime": "baseline", "status": "ok", "baseline": True,
             "macro_f1": 0.9, "texts_per_second": 5000.0, "history": []},
            {"model_name": "x", "strategy": "s", "regime": "lora", "status": "error", "error": "boom"}]
    _assert_png(plot_learning_curves(rows, tmp_path / "curves.png"))
    _assert_png(plot_quality_vs_speed(rows, tmp_path / "speed.png"))
    _assert_png(plot_quality_vs_speed([], tmp_path / "empty.png"))


def test_bench_arguments():
    from headswap.cli import bench as cli_bench

    parser = argparse.ArgumentParser()
    cli_bench.add_arguments(parser)
    parser.set_defaults(func=cli_bench.run)
    args = parser.parse_args(["--data", "d", "--model", "a", "b", "--strategies", "encoder-mlp,slm-logits",
                              "--train-limit", "100", "--no-zero-shot", "--quiet", "--epochs", "0"])
    assert args.models == ["a", "b"] and args.strategies == ["encoder-mlp,slm-logits"]
    assert args.train_limit == 100 and args.test_limit is None and args.epochs == 0
    assert args.no_zero_shot and args.quiet and args.func is cli_bench.run
    defaults = parser.parse_args(["--data", "d"])
    assert defaults.models == ["minilm", "smollm2-135m"] and defaults.strategies == ["all"]
    assert defaults.regime == "auto" and defaults.out == "bench-out" and defaults.batch_size == 16
    assert defaults.body_lr is None and defaults.head_lr == 1e-3 and defaults.epochs == 1
    lrs = parser.parse_args(["--data", "d", "--body-lr", "1e-4", "--head-lr", "2e-3"])
    assert (lrs.body_lr, lrs.head_lr) == (1e-4, 2e-3)
    for bad in (["--train-limit", "0"], ["--regime", "half"], ["--epochs", "-1"], ["--body-lr", "0"],
                ["--head-lr", "fast"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["--data", "d", *bad])


def test_learning_rates_reach_each_row():
    row = PlannedRow("minilm", "encoder", "encoder-mlp", "full", 1)
    plain = classifier_for(row, dict(seed=0, batch_size=8, max_length=32, progress=False))
    assert plain.body_lr is None and plain.head_lr == 1e-3          # TextClassifier's defaults stay
    set_lr = classifier_for(row, dict(seed=0, batch_size=8, max_length=32, progress=False,
                                   body_lr=1e-4, head_lr=5e-3))
    assert (set_lr.body_lr, set_lr.head_lr) == (1e-4, 5e-3)


def test_learning_rates_in_results(tiny_dirs, tmp_path):
    _, enc, _, data = tiny_dirs
    results = run_bench(data, models=[enc], strategies="encoder-mlp", epochs=1, train_limit=20, test_limit=10,
                        out=tmp_path, progress=False, estimate=False, log=lambda _msg: None, body_lr=1e-4)
    assert results["meta"]["args"]["body_lr"] == 1e-4 and results["meta"]["args"]["head_lr"] is None
    md = (tmp_path / "results.md").read_text()
    assert "body lr 0.0001." in md and "head lr" not in md


def test_generate_parse_counts_cover_exactly_the_test_texts(tiny_dirs):
    # Training validates every epoch through the same module; those answers must not leak into the row.
    _, _, cau, data = tiny_dirs
    bench_data = load_bench_data(data, train_limit=20, test_limit=10)
    row = run_model_row(PlannedRow(cau, "causal", "generate-parse", "full", 2), bench_data,
                        dict(seed=0, batch_size=8, max_length=32, progress=False))
    assert row["status"] == "ok", row.get("error")
    assert sum(row["parse_counts"].values()) == len(bench_data.test) == 10
    assert row["unparsed"] == row["parse_counts"].get("unparsed", 0)
