"""The one-page HTML report: sections, self-contained images, escaping, the auto part, and a real browser."""

from __future__ import annotations

import base64
import copy
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from headswap.reports.html_report import dump_dom, find_browser, render_html, screenshot, write_html

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SECTIONS = ["summary", "results", "quality-vs-speed", "learning-curves", "confusion", "skipped"]


class Page(HTMLParser):
    """What the tests look at: element ids, sections in order, attributes that point somewhere, images, the
    rows of each section's tables and each section's text."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.ids, self.sections, self.links, self.images, self.tags = [], [], [], [], []
        self.rows: dict[str, list[tuple[str, list[str]]]] = {}
        self.text: dict[str, str] = {}
        self._section, self._row, self._cell, self._head = None, None, None, False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if "id" in attrs:
            self.ids.append(attrs["id"])
        for key in ("href", "src", "action", "poster", "data"):
            if attrs.get(key):
                self.links.append(attrs[key])
        if tag == "section":
            self._section = attrs.get("id")
            self.sections.append(self._section)
            self.rows[self._section], self.text[self._section] = [], ""
        elif tag == "img":
            self.images.append((self._section, attrs.get("src", ""), attrs.get("alt", "")))
        elif tag == "thead":
            self._head = True
        elif tag == "tr" and not self._head:
            self._row = (attrs.get("class") or "", [])
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row[1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._section is not None:
                self.rows[self._section].append(self._row)
            self._row = None
        elif tag == "thead":
            self._head = False
        elif tag == "section":
            self._section = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._section is not None:
            self.text[self._section] += data

    def body_rows(self, section: str) -> list[tuple[str, list[str]]]:
        """The table body rows of a section (header rows left out), as (tr class, cell texts)."""
        return self.rows[section]


def _history(*scores):
    return [{"epoch": i, "train_loss": 1.0 / i, "score": s, "validation_accuracy": s} for i, s in enumerate(scores, 1)]


def _row(name, strategy, regime, f1, labels=("ham", "spam"), **extra):
    k = len(labels)
    confusion = (np.eye(k, dtype=int) * 8 + 1).tolist()
    row = {"model": name, "model_name": name, "strategy": strategy, "regime": regime, "status": "ok",
           "baseline": False, "macro_f1": f1, "weighted_f1": f1, "accuracy": f1, "labels": list(labels),
           "f1_per_class": {lab: f1 for lab in labels}, "confusion": confusion,
           "n_test": int(np.sum(confusion)), "texts_per_second": 100.0 * (1 + f1), "trainable_params": 12345,
           "effective_params": 23456, "train_seconds": 3.2, "peak_rss_delta_mb": 12.0, "history": [],
           "best_epoch": None}
    row.update(extra)
    return row


def results_dict(labels=("ham", "spam")) -> dict:
    """A bench results dict as run_bench writes it: baseline, two trained rows, a zero-shot row, a failure."""
    rows = [
        _row("tfidf", "tfidf-linearsvc", "baseline", 0.80, labels, baseline=True),
        _row("tiny-enc", "encoder-mlp", "full", 0.90, labels, history=_history(0.5, 0.7, 0.72), best_epoch=3,
             notes=["3 of 40 training texts were longer than 64 tokens"]),
        _row("tiny-causal", "slm-logits", "lora", 0.60, labels, history=_history(0.4, 0.55), best_epoch=2,
             tied_embeddings=True),
        _row("tiny-causal", "slm-logits", "zero-shot", 0.30, labels, unparsed=0),
        {"model": "tiny-causal", "model_name": "tiny-causal", "strategy": "generate-parse", "regime": "full",
         "status": "error", "baseline": False, "error": "RuntimeError: out of memory <while> generating",
         "traceback": "Traceback (most recent call last):\n  ...\nRuntimeError: out of memory"},
    ]
    meta = {"date": "2026-11-24T00:00:00+00:00", "headswap_version": "0.1.0",
            "machine": {"platform": "Linux-test", "cpu_count": 2, "torch": "2.x", "torch_threads": 1,
                        "memory_gb": 8.0, "python": "3.11"},
            "args": {"data_dir": "data/sms", "epochs": 3, "regime": "auto", "batch_size": 16, "max_length": 64,
                     "seed": 0, "train_limit": 40, "test_limit": None, "body_lr": None, "head_lr": None},
            "command": ["headswap", "bench", "--data", "data/sms", "--epochs", "3"],
            "data": {"train": {"file": "train.csv", "rows": 100, "used": 40, "classes": {"ham": 27, "spam": 13}},
                     "validation": {"file": None},
                     "test": {"file": "test.csv", "rows": 21, "used": 21, "classes": {"ham": 14, "spam": 7}}},
            "elapsed_seconds": 42.0}
    skipped = [{"model": "models/tiny-enc", "strategy": "slm-logits",
                "reason": "slm-logits needs a causal language model; this model is an encoder"}]
    return {"meta": meta, "rows": rows, "skipped": skipped}


def auto_part() -> dict:
    return {"budget_seconds": 600, "elapsed_seconds": 512.5, "model_dir": "auto-out/model", "exported": True,
            "winner": {"model_name": "tiny-enc", "strategy": "encoder-mlp", "regime": "full",
                       "validation_macro_f1": 0.74},
            "candidates": [
                {"model_name": "tfidf", "strategy": "tfidf-logreg", "regime": "baseline", "status": "ran",
                 "seconds": 1.5, "validation_macro_f1": 0.61},
                {"model_name": "tiny-enc", "strategy": "encoder-mlp", "regime": "full", "status": "ran",
                 "estimated_seconds": 100.0, "seconds": 90.0, "validation_macro_f1": 0.74, "tier": "fine-tune",
                 "rung": "full", "time_bounded": {"limit_seconds": 80.0, "why": "did not fit half of what was left",
                                                  "epochs": 2, "eval_every_steps": 5,
                                                  "stopped": "time limit 80 s reached after 7 of 12 steps of epoch 2"}},
                {"model_name": "tiny-causal", "strategy": "slm-logits", "regime": "lora", "status": "skipped",
                 "estimated_seconds": 2000.0, "reason": "estimated 33 min, 8 min of the budget left"},
                {"model_name": "tiny-causal", "strategy": "generate-parse", "regime": "full", "status": "failed",
                 "reason": "failed while timing a first batch", "error": "ValueError: <bad> tokenizer"},
            ]}


def _png_data(src: str) -> bytes:
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix), src[:60]
    data = base64.b64decode(src[len(prefix):], validate=True)
    assert data[:8] == PNG_SIGNATURE
    return data


def _assert_self_contained(html: str, page: Page) -> None:
    assert "http://" not in html and "https://" not in html
    assert all(link.startswith(("#", "data:")) for link in page.links), page.links
    for tag in ("script", "link", "iframe", "object", "embed"):
        assert tag not in page.tags
    assert "@import" not in html and "url(" not in html


# ---- the page -----------------------------------------------------------------------------------------------------


def test_sections_images_and_table():
    html = render_html(results_dict())
    page = Page(html)
    assert page.sections == SECTIONS
    assert len(set(page.ids)) == len(page.ids)
    _assert_self_contained(html, page)
    # one chart each, and a confusion matrix per successful row
    where = [section for section, _, _ in page.images]
    assert where.count("quality-vs-speed") == 1 and where.count("learning-curves") == 1
    assert where.count("confusion") == 4
    for _, src, alt in page.images:
        _png_data(src)
        assert alt

    rows = page.body_rows("results")[:5]
    assert [cells[0] for _, cells in rows] == ["1", "2", "3", "4", "5"]
    assert [cells[2] for _, cells in rows] == ["encoder-mlp", "tfidf-linearsvc", "slm-logits", "slm-logits",
                                                "generate-parse"]
    assert [cells[4] for _, cells in rows[:4]] == ["0.900", "0.800", "0.600", "0.300"]   # best macro F1 first
    assert rows[0][1][5] == "+0.100" and rows[1][1][5] == "–"
    assert rows[1][0] == "baseline" and "baseline" in rows[1][1][1]
    failed_cls, failed = rows[4]
    assert failed_cls == "failed" and "failed" in failed[1]
    assert len(failed) == 5 and "RuntimeError: out of memory <while> generating" in failed[4]   # one wide cell
    assert "3 of 40 training texts were longer than 64 tokens" in page.text["results"]
    f1 = [cells for _, cells in page.body_rows("results")[5:]]
    assert [cells[0] for cells in f1] == ["ham", "spam"]

    summary = page.text["summary"]
    for text in ("2026-11-24T00:00:00+00:00", "Linux-test", "40 of 100 texts", "21 of 21 texts",
                 "headswap bench --data data/sms --epochs 3", "epochs 3", "42 s"):
        assert text in summary, text
    assert "needs a causal language model" in page.text["skipped"] and "tiny-enc" in page.text["skipped"]
    assert "calibration" not in page.ids and "auto" not in page.ids


def test_user_text_is_escaped():
    results = results_dict(labels=("<b>x</b>", "a & b"))
    results["rows"][4]["error"] = "ValueError: <script>alert(1)</script>"
    results["rows"][1]["model_name"] = 'tiny"enc<i>'
    results["meta"]["command"] = ["headswap", "bench", "--data", "<img src=x>"]
    html = render_html(results, title="<title> & co")
    page = Page(html)
    for raw in ("<b>x</b>", "<script>", "<i>", "<img src=x>", "<title> & co"):
        assert raw not in html, raw
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "a &amp; b" in html
    assert "b" not in page.tags and "script" not in page.tags and "i" not in page.tags
    assert "<b>x</b>" in page.text["results"] and "ValueError: <script>alert(1)</script>" in page.text["results"]
    assert 'tiny"enc<i>' in page.text["results"]


def test_auto_section():
    results = results_dict()
    results["auto"] = auto_part()
    results["rows"][1]["winner"] = True
    html = render_html(results)
    page = Page(html)
    assert page.sections[:3] == ["summary", "auto", "results"]
    text = page.text["auto"]
    for fragment in ("10.0 min", "8.5 min", "auto-out/model", "tiny-enc · encoder-mlp · full", "exported",
                     "estimated 33 min", "ValueError: <bad> tokenizer", "time-bounded to 80 s of training",
                     "reached after 7 of 12 steps of epoch 2"):
        assert fragment in text, fragment
    candidates = page.body_rows("auto")
    assert len(candidates) == 4
    winners = [cells for cls, cells in candidates if cls == "winner"]
    assert len(winners) == 1 and winners[0][1:4] == ["tiny-enc", "encoder-mlp", "full"]
    assert "winner" in winners[0][5]
    assert [cells[5].split()[0] for _, cells in candidates] == ["ran", "ran", "skipped", "failed"]
    assert "<title>headswap auto</title>" in html
    assert [cls for cls, _ in page.body_rows("results")][0] == "winner"


def test_missing_optional_parts_do_not_crash():
    for results in ({}, {"rows": []}, {"meta": {}, "rows": [], "skipped": []},
                    {"rows": [{"model_name": "m"}]},
                    {"rows": [{"status": "error"}], "skipped": [{"strategy": "s"}, "odd"]},
                    {"meta": {"data": {"train": {}}, "machine": {}}, "auto": {}},
                    {"auto": {"winner": "just a name", "candidates": [{}, {"status": "ran"}, "odd"]}},
                    {"auto": {"budget_seconds": None, "winner": {"strategy": "x"}, "candidates": None}}):
        html = render_html(copy.deepcopy(results))
        page = Page(html)
        assert {"summary", "results", "quality-vs-speed", "confusion", "skipped"} <= set(page.sections), results
        assert "learning-curves" not in page.sections and "calibration" not in page.sections
        assert ("auto" in page.sections) == ("auto" in results)
        _assert_self_contained(html, page)


def test_calibration_section():
    from headswap.decisions.calibration import report

    rng = np.random.default_rng(0)
    logits, y = rng.normal(size=(60, 2)) * 3, rng.integers(0, 2, size=60)
    results = results_dict()
    results["rows"][1]["calibration"] = report(logits, y, 1.7)
    page = Page(render_html(results))
    assert page.sections.index("calibration") == page.sections.index("confusion") + 1
    images = [src for section, src, _ in page.images if section == "calibration"]
    assert len(images) == 1 and _png_data(images[0])
    assert "temperature 1.700" in page.text["calibration"] and "ECE" in page.text["calibration"]


def test_a_failing_chart_keeps_the_rest(monkeypatch):
    import headswap.reports.plots

    def broken(*_args, **_kw):
        raise RuntimeError("no <canvas>")

    monkeypatch.setattr(headswap.reports.plots, "plot_quality_vs_speed", broken)
    html = render_html(results_dict())
    page = Page(html)
    assert page.sections == SECTIONS
    assert "could not draw" in page.text["quality-vs-speed"] and "no <canvas>" in page.text["quality-vs-speed"]
    assert not [s for s, _, _ in page.images if s == "quality-vs-speed"]
    assert len([s for s, _, _ in page.images if s == "confusion"]) == 4


def test_many_labels_are_a_shaded_table():
    labels = [f"label-{i}" for i in range(20)]
    page = Page(render_html(results_dict(labels=labels)))
    assert not [s for s, _, _ in page.images if s == "confusion"]
    heat = page.rows["confusion"]
    assert len(heat) == 4 * 20                       # per row, one per true class
    assert heat[0][1][0] == "label-0" and heat[0][1][1:3] == ["9", "1"]


def test_write_html(tmp_path):
    path = write_html(results_dict(), tmp_path / "sub" / "report.html")
    assert path == tmp_path / "sub" / "report.html"
    assert Page(path.read_text(encoding="utf-8")).sections == SECTIONS
    assert not list(path.parent.glob("*.tmp"))


# ---- a real browser -----------------------------------------------------------------------------------------------


@pytest.mark.skipif(find_browser() is None, reason="no chromium, chromium-browser or google-chrome on PATH")
def test_chromium_renders_the_page(tmp_path):
    results = results_dict(labels=("<b>x</b>", "spam"))
    results["auto"] = auto_part()
    html_path = write_html(results, tmp_path / "report.html")
    png = screenshot(html_path, tmp_path / "report.png", 1200, 2400, timeout=120)

    dom = Page(dump_dom(html_path, timeout=120))
    assert dom.sections == ["summary", "auto"] + SECTIONS[1:]
    assert len(dom.body_rows("results")) == 5 + 2          # 5 result rows, then the F1 per class rows
    assert len(dom.body_rows("auto")) == 4
    assert "<b>x</b>" in dom.text["results"] and "b" not in dom.tags
    assert len(dom.images) == 6 and all(src.startswith("data:image/png;base64,") for _, src, _ in dom.images)

    data = png.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 20_000
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(png) as image:
        assert image.size == (1200, 2400)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 100                  # text, tables and charts, not a blank page
    # charts drawn: the matplotlib blues of the bars and matrices are on the page
    assert colours is None or any(b > r + 60 and b > 150 for _, (r, g, b) in colours)


def test_bench_writes_report_html(tmp_path):
    # write_outputs (bench's last step) writes the page beside results.md
    from headswap.bench.report import write_outputs

    results = results_dict()
    logs: list[str] = []
    written = write_outputs(results, tmp_path, logs.append)
    assert tmp_path / "report.html" in [Path(p) for p in written]
    assert Page((tmp_path / "report.html").read_text(encoding="utf-8")).sections == SECTIONS
    assert not logs
