"""`headswap audit` and headswap.audit: label errors (cleanlab on out-of-fold probabilities) and near duplicates
(cleanlab Datalab on TF-IDF features), on synthetic data whose flipped labels are known. TF-IDF only, except one
tiny-model run of a TextClassifier strategy."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import random
from pathlib import Path

import pytest
from cli_run import invoke

from headswap import audit
from headswap.errors import ConfigError, DataError
from headswap.jobs.label_audit import DUPLICATE_COLUMNS, ISSUE_COLUMNS
from headswap.saved.outputs import MANIFEST

pytestmark = pytest.mark.usefixtures("one_thread")

TOPICS = {
    "sport": "goal match team score league coach player stadium referee striker".split(),
    "food": "pizza pasta bread cheese salad soup recipe oven spices dessert".split(),
    "tech": "laptop code phone software chip cloud server keyboard battery app".split(),
}
FILLER = "the a today really very we they it was is and so my our".split()


def synthetic(n_per_class: int = 80, flip_share: float = 0.05, seed: int = 0):
    """(texts, labels, flipped indices, true labels): topic words mixed with filler, then a seeded share of the
    labels flipped uniformly to another class."""
    rng = random.Random(seed)
    texts, truth = [], []
    for i in range(n_per_class * len(TOPICS)):
        topic = list(TOPICS)[i % len(TOPICS)]
        words = [rng.choice(TOPICS[topic]) if rng.random() < 0.5 else rng.choice(FILLER) for _ in range(14)]
        texts.append(" ".join(words) + f" note{i}")
        truth.append(topic)
    labels = list(truth)
    flipped = sorted(rng.sample(range(len(texts)), round(flip_share * len(texts))))
    for i in flipped:
        labels[i] = rng.choice([t for t in TOPICS if t != truth[i]])
    return texts, labels, set(flipped), truth


@pytest.fixture(scope="module")
def noisy():
    texts, labels, flipped, truth = synthetic()
    return texts, labels, flipped, audit(texts, labels, folds=5, seed=0)


def test_flipped_labels_rank_at_the_top(noisy):
    texts, labels, flipped, result = noisy
    issues = {r["index"] for r in result.issues()}
    precision, recall = len(issues & flipped) / len(issues), len(issues & flipped) / len(flipped)
    # chance is 5% (the share flipped); here cleanlab flags 11 rows, all flipped, and 11 of the 12 flipped
    assert precision >= 0.8 and recall >= 0.75, (precision, recall)
    top = {r["index"] for r in result.label_issues[:len(flipped)]}
    assert len(top & flipped) / len(flipped) >= 0.8
    # the flipped rows' suggested labels are mostly the true topic
    truth = synthetic()[3]
    right = sum(r["suggested_label"] == truth[r["index"]] for r in result.label_issues if r["index"] in flipped)
    assert right >= 0.8 * len(flipped)


def test_result_is_ranked_and_complete(noisy):
    texts, labels, flipped, result = noisy
    rows = result.label_issues
    assert [r["rank"] for r in rows] == list(range(1, len(texts) + 1))
    assert sorted(r["index"] for r in rows) == list(range(len(texts)))
    flags = [r["is_issue"] for r in rows]
    assert flags == sorted(flags, reverse=True)         # cleanlab's issues first ...
    issues = [r["label_quality"] for r in rows if r["is_issue"]]
    rest = [r["label_quality"] for r in rows if not r["is_issue"]]
    assert issues == sorted(issues) and rest == sorted(rest)   # ... each part worst first
    assert result.pred_probs.shape == (len(texts), 3)
    assert result.summary["counts"]["label_issues"] == len(result.issues())
    assert all(r["given_label"] == labels[r["index"]] and r["text"] == texts[r["index"]] for r in rows)


def test_near_duplicates_with_conflicting_labels_are_found():
    texts, labels, _, _ = synthetic(n_per_class=40, flip_share=0)
    texts += [texts[3] + "!", texts[10], texts[20]]       # a near copy and an exact copy with other labels,
    labels += ["tech" if labels[3] != "tech" else "food", "sport" if labels[10] != "sport" else "food", labels[20]]
    result = audit(texts, labels, folds=3)                  # and an exact copy with the same label
    groups = {}
    for r in result.near_duplicates:
        groups.setdefault(r["group"], set()).add(r["index"])
    by_member = {i: g for g, members in groups.items() for i in members}
    assert groups[by_member[3]] == {3, 120} and groups[by_member[10]] == {10, 121}
    assert groups[by_member[20]] == {20, 122}
    conflicting = {r["index"] for r in result.conflicting_duplicates()}
    assert conflicting == {3, 120, 10, 121}
    first = result.near_duplicates[0]
    assert first["conflicting_labels"] and first["group"] == 1      # conflicting groups come first
    counts = result.summary["counts"]
    assert counts["conflicting_label_groups"] == 2 and counts["near_duplicate_groups"] == 3


def test_python_api_refuses_bad_arguments():
    texts, labels, _, _ = synthetic(n_per_class=10, flip_share=0)
    with pytest.raises(ConfigError, match="folds must be a whole number >= 2"):
        audit(texts, labels, folds=1)
    with pytest.raises(DataError, match="not a single str"):
        audit("a text", labels)
    with pytest.raises(DataError, match="class 'x' has 2 texts, fewer than the 5 folds"):
        audit(texts + ["one", "two"], labels + ["x", "x"])
    with pytest.raises(ConfigError, match="takes no TextClassifier settings"):
        audit(texts, labels, epochs=2)
    # No word of two letters (scikit-learn's token pattern): the TF-IDF features are character n-grams alone.
    assert len(audit(["a b", "a c", "x y", "x z"], ["p", "p", "q", "q"], folds=2).label_issues) == 4


# ---- the command line -------------------------------------------------------------------------------------------


def write_csv(path: Path, texts, labels) -> dict[int, str]:
    """Write text,label rows; {line where each record starts: text} (a text with a line break spans two)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["text", "label"])
    starts, line = {}, 2
    for text, label in zip(texts, labels):
        starts[line] = text
        writer.writerow([text, label])
        line += 1 + text.count("\n")
    path.write_text(buf.getvalue(), encoding="utf-8")
    return starts


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    texts, labels, flipped, _ = synthetic()
    texts = list(texts)
    texts[5] = "a text, with a comma\nand a line break " + texts[5]     # row numbers must follow the file's lines
    texts[7] = 'quoted "words" ' + texts[7]
    texts.append(texts[9])                                               # an exact copy with another label
    labels = labels + ["tech" if labels[9] != "tech" else "food"]
    data = tmp_path_factory.mktemp("audit-data")
    starts = write_csv(data / "train.csv", texts, labels)
    (data / "test.csv").write_text("text,label\nhello,food\n")
    return {"dir": data, "starts": starts, "texts": texts, "labels": labels, "flipped": flipped}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cli_writes_the_four_files_with_row_numbers_of_the_csv(folder, tmp_path):
    out = tmp_path / "audit"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    before = {p.name: sha(p) for p in folder["dir"].iterdir()}
    rc, stdout, stderr = invoke(["audit", "--data", str(folder["dir"]), "--out", str(out), "-q"])
    assert rc == 0, stderr
    assert {p.name: sha(p) for p in folder["dir"].iterdir()} == before          # the data is only read
    assert (out / "notes.txt").read_text() == "keep me"                           # a user's file is left alone
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "audit.html", "audit.json", "label_issues.csv",
                                                     "near_duplicates.csv", "notes.txt"]

    with open(out / "label_issues.csv", newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == ISSUE_COLUMNS
        rows = list(reader)
    assert len(rows) == len(folder["texts"])
    for r in rows:
        assert folder["starts"][int(r["row"])] == r["text"]          # row = the line where the record starts
    assert {r["is_issue"] for r in rows} == {"true", "false"}
    flagged = [r for r in rows if r["is_issue"] == "true"]
    lines = {line: i for i, line in enumerate(sorted(folder["starts"]))}
    hits = sum(lines[int(r["row"])] in folder["flipped"] for r in flagged)
    assert hits / len(flagged) >= 0.6 and hits / len(folder["flipped"]) >= 0.6

    with open(out / "near_duplicates.csv", newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == DUPLICATE_COLUMNS
        dups = list(reader)
    copy_lines = {line for line, text in folder["starts"].items() if text == folder["texts"][9]}
    assert len(copy_lines) == 2
    assert {int(r["row"]) for r in dups if r["conflicting_labels"] == "true"} >= copy_lines

    report = json.loads((out / "audit.json").read_text())
    assert report["rows"] == len(folder["texts"]) and report["settings"]["folds"] == 5
    assert report["counts"]["label_issues"] == len(flagged)
    assert report["settings"]["strategy"] == "tfidf" and report["data"].endswith("train.csv")
    assert set(report["timing"]) >= {"out_of_fold_seconds", "label_issues_seconds", "near_duplicates_seconds",
                                     "total_seconds"}
    html = (out / "audit.html").read_text()
    assert 'id="label-issues"' in html and 'id="near-duplicates"' in html
    assert "quoted &quot;words&quot;" in html or "quoted" not in flagged[0]["text"]
    assert f"label issues: {len(flagged)} (" in stdout and "near duplicates:" in stdout
    assert stdout.count("\n") <= 16                                              # the summary and the top 10


@pytest.mark.parametrize("args, message", [
    (["--data", "{tmp}/nope"], "{tmp}/nope: no such file or directory"),
    (["--data", "{empty}"], "train.csv is missing: headswap audit needs train.csv"),
    (["--data", "{one_class}"], "needs at least 2 classes"),
    (["--data", "{small}"], "class 'c' has 3 texts, fewer than the 5 folds: stratified k-fold holds out texts of "
                            "every class in each fold; use --folds 3 or fewer"),
    (["--data", "{small}", "--folds", "1"], "--folds: expected a number >= 2, got 1"),
    (["--data", "{small}", "--folds", "x"], "--folds: expected a whole number, got 'x'"),
    (["--data", "{small}", "--out", "{file}"], "is an existing file; give a directory"),
    (["--data", "{small}", "--epochs", "2"], "--epochs is a setting of the TextClassifier strategies"),
    (["--data", "{small}", "--strategy", "bogus"], "invalid choice: 'bogus'"),
    (["--data", "{small}", "--strategy", "encoder-mlp", "--model", "no-such-model"], "--model no-such-model"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    one_class = tmp_path / "one"
    one_class.mkdir()
    write_csv(one_class / "train.csv", [f"text {i}" for i in range(10)], ["a"] * 10)
    small = tmp_path / "small.csv"
    write_csv(small, [f"text {i}" for i in range(23)], ["a"] * 10 + ["b"] * 10 + ["c"] * 3)
    (tmp_path / "f").write_text("x")
    (tmp_path / "empty").mkdir()
    fill = {"tmp": tmp_path, "one_class": one_class, "small": small, "file": tmp_path / "f",
            "empty": tmp_path / "empty"}
    args = [a.format(**fill) for a in args]
    rc, _, err = invoke(["audit", *args, "--out", str(tmp_path / "out")] if "--out" not in args else ["audit", *args])
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert message.format(**fill) in lines[0], lines[0]
    assert not (tmp_path / "out").exists()                  # nothing written


def test_a_textclassifier_strategy_runs_per_fold(tmp_path):
    from tiny_models import make_tiny_encoder
    enc = make_tiny_encoder(tmp_path / "enc")
    texts = ["win cash now call", "free entry txt win prize", "urgent you have won"] * 4 + \
            ["see you at noon", "running late sorry", "ok on my way home"] * 4
    labels = ["spam"] * 12 + ["ham"] * 12
    result = audit(texts, labels, strategy="encoder-mlp", folds=3, model=str(enc), epochs=1, eval_fraction=0)
    assert result.pred_probs.shape == (24, 2)
    assert abs(result.pred_probs.sum(1) - 1).max() < 1e-6
    assert result.summary["settings"]["classifier"]["class"] == "headswap.TextClassifier"
    assert len(result.summary["timing"]["fold_seconds"]) == 3
