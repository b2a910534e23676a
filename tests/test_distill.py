"""Distillation into the TF-IDF student: it learns the teacher's answers (not the labels it is given, with
label_weight 0; exactly the labels with label_weight 1), unlabelled texts teach it the teacher's answers where the
labels say nothing, its directory reloads with the same probabilities and a record of where it came from, the
command runs end to end, and every misuse is one clear line. The static student (a TextClassifier trained on the
same soft targets, student="static" / --student static) is checked the same way at the end."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.classifier.estimator import load_model
from headswap.cli.parser import main
from headswap.jobs.distill import distill
from headswap.errors import HeadswapError
from headswap.baseline.tfidf import TfidfClassifier

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home", "urgent prize", "running late",
         "claim your free prize", "call me when you are home", "you have won cash", "on my way"] * 3
LABELS = ["spam", "spam", "ham", "ham", "spam", "ham", "spam", "ham", "spam", "ham"] * 3
# The data the student is distilled on carries wrong labels on the first three distinct texts: a student that
# follows the teacher, not the labels, answers the teacher's label there.
WRONG = {"win cash now": "ham", "free call now": "ham", "see you at noon": "spam"}
NOISY = [WRONG.get(t, y) for t, y in zip(TEXTS, LABELS)]
UNLABELLED = ["zebra quokka", "banana split sundae", "quiet library morning", "xylophone jazz", "see you later",
              "call home", "mountain bike trail", "urgent home"]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    root = tmp_path_factory.mktemp("distill")
    enc = make_tiny_encoder(root / "enc")
    clf = TextClassifier(model=str(enc), epochs=10, head_lr=1e-2, body_lr=1e-2, eval_fraction=0,
                         progress=False).fit(TEXTS, LABELS)
    return {"root": root, "enc": enc, "dir": clf.save(root / "teacher"), "clf": clf}


def test_the_student_learns_the_teachers_answers_not_the_labels(teacher):
    clf = teacher["clf"]
    student = distill(clf, TEXTS, NOISY, progress=False)
    said = list(clf.predict(TEXTS))
    assert said == LABELS and len(set(said)) == 2       # the teacher learnt the clean labels
    assert student.labels_ == clf.labels_
    agree = np.mean(np.array(student.predict(TEXTS)) == np.array(said))
    assert agree >= 0.9
    assert [student.predict([t])[0] for t in WRONG] == [LABELS[TEXTS.index(t)] for t in WRONG]
    record = student.distillation_
    assert record["agreement"] == pytest.approx(agree) and record["teacher"] is None
    assert (record["texts"], record["labelled"], record["unlabelled"], record["label_weight"]) == (30, 30, 0, 0.0)
    assert record["teacher_seconds"] >= 0 and record["teacher_strategy"] == "encoder-mlp"


def test_label_weight_one_trains_exactly_as_the_labels(teacher):
    student = distill(teacher["clf"], TEXTS, NOISY, label_weight=1.0, progress=False)
    plain = TfidfClassifier().fit(TEXTS, NOISY)
    assert plain.labels_ == student.labels_
    np.testing.assert_allclose(student.predict_proba(UNLABELLED + TEXTS), plain.predict_proba(UNLABELLED + TEXTS),
                               atol=1e-6)
    # Half and half: the targets are the average of the teacher's probabilities and the one-hot labels.
    half = distill(teacher["clf"], TEXTS, NOISY, label_weight=0.5, progress=False)
    p0 = distill(teacher["clf"], TEXTS, NOISY, progress=False).predict_proba(TEXTS)
    p5, p1 = half.predict_proba(TEXTS), student.predict_proba(TEXTS)
    wrong = [i for i, t in enumerate(TEXTS) if t in WRONG]
    assert np.all(np.abs(p5 - p0)[wrong].max(1) > 0.01) and np.all(np.abs(p5 - p1)[wrong].max(1) > 0.01)


def test_unlabelled_texts_teach_the_student_the_teachers_answers(teacher):
    clf = teacher["clf"]
    want = list(clf.predict(UNLABELLED))
    assert len(set(want)) == 2
    without = distill(clf, TEXTS, LABELS, progress=False)
    with_them = distill(clf, TEXTS, LABELS, unlabeled=UNLABELLED, progress=False)
    assert list(with_them.predict(UNLABELLED)) == want
    assert list(without.predict(UNLABELLED)) != want          # the labelled texts alone do not teach this
    record = with_them.distillation_
    assert (record["texts"], record["unlabelled"], record["agreement_unlabelled"]) == (30, len(UNLABELLED), 1.0)
    # Texts without any labels at all: the teacher labels them.
    alone = distill(teacher["dir"], TEXTS + UNLABELLED, progress=False)
    assert list(alone.predict(UNLABELLED)) == want and alone.distillation_["labelled"] == 0
    assert alone.distillation_["teacher"] == str(teacher["dir"])


def test_the_saved_student_reloads_exactly_with_its_record(teacher, tmp_path):
    student = distill(teacher["dir"], TEXTS, LABELS, unlabeled=UNLABELLED, label_weight=0.25, progress=False)
    d = student.save(tmp_path / "student")
    again = load_model(d)
    assert isinstance(again, TfidfClassifier)
    np.testing.assert_array_equal(again.predict_proba(UNLABELLED + TEXTS), student.predict_proba(UNLABELLED + TEXTS))
    assert again.distillation_ == student.distillation_
    config = json.loads((d / "headswap_config.json").read_text())
    assert config["distillation"]["label_weight"] == 0.25 and len(json.dumps(config["distillation"])) < 600
    # Refitting drops the record: the model is no longer the distilled one.
    assert not hasattr(again.fit(TEXTS, LABELS), "distillation_")
    assert "distillation" not in json.loads((again.save(tmp_path / "plain") / "headswap_config.json").read_text())


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "headswap.cli", *args], capture_output=True, text=True)


def _main(*args) -> tuple[int, str]:
    """The command in this process (no second torch import): exit code and stderr."""
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        try:
            rc = main(list(args))
        except SystemExit as e:
            rc = e.code
    return rc, err.getvalue()


def test_the_command_distills_and_the_student_predicts(teacher, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    rows = "text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(TEXTS, NOISY))
    (data / "train.csv").write_text(rows)
    (data / "validation.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(TEXTS, LABELS)))
    (tmp_path / "more.csv").write_text("id,text\n" + "".join(f"{i},{t}\n" for i, t in enumerate(UNLABELLED)))
    out = tmp_path / "student"
    r = _cli("distill", "--teacher", str(teacher["dir"]), "--data", str(data), "--unlabeled",
             str(tmp_path / "more.csv"), "--label-weight", "0.2", "--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    wrote = [line for line in r.stderr.splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 1 and f"{len(TEXTS) + len(UNLABELLED)} texts" in wrote[0], r.stderr
    assert "agrees with the teacher on 100.0% of the training texts and 100.0% of the unlabelled" in wrote[0]
    assert "validation" in r.stderr and "macro F1 student 1.000, teacher 1.000" in r.stderr
    record = json.loads((out / "headswap_config.json").read_text())["distillation"]
    assert (record["labelled"], record["unlabelled"], record["label_weight"]) == (30, len(UNLABELLED), 0.2)
    assert record["teacher"] == str(teacher["dir"].resolve())
    r = _cli("predict", "--model-dir", str(out), "-q", *UNLABELLED)
    assert r.returncode == 0, r.stderr
    assert [json.loads(line)["label"] for line in r.stdout.splitlines()] == list(teacher["clf"].predict(UNLABELLED))
    # The teacher's own directory is refused as --out.
    # A second run replaces the student in place; a .txt file is one unlabelled text per line.
    (tmp_path / "more.txt").write_text("\n".join(UNLABELLED[:3]) + "\n\n")
    rc, err = _main("distill", "--teacher", str(teacher["dir"]), "--data", str(data / "train.csv"), "--unlabeled",
                    str(tmp_path / "more.txt"), "--out", str(out), "-q")
    assert rc == 0, err
    assert json.loads((out / "headswap_config.json").read_text())["distillation"]["unlabelled"] == 3
    rc, err = _main("distill", "--teacher", str(teacher["dir"]), "--data", str(data), "--out", str(teacher["dir"]),
                    "-q")
    assert rc == 2 and f"--out {teacher['dir']} is the model --teacher {teacher['dir']}; saving would replace it" in err


def _one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_misuse_is_one_line_naming_the_problem(teacher, tmp_path):
    clf = teacher["clf"]
    with pytest.raises(HeadswapError) as e:
        distill(clf, TEXTS, [y if y == "spam" else "eggs" for y in LABELS], progress=False)
    assert "labels the teacher does not know: 'eggs'" in _one_line(e)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(HeadswapError) as e:
            distill(clf, TEXTS, LABELS, label_weight=bad, progress=False)
        assert "label_weight must be in [0, 1]" in _one_line(e)
    with pytest.raises(HeadswapError) as e:
        distill(clf, [], progress=False)
    assert "list of training texts is empty" in _one_line(e)
    with pytest.raises(HeadswapError) as e:
        distill(clf, TEXTS, LABELS, unlabeled=[], progress=False)
    assert "unlabelled texts are an empty list" in _one_line(e)
    with pytest.raises(HeadswapError) as e:
        distill(clf, TEXTS, label_weight=0.5, progress=False)
    assert "no labels were given" in _one_line(e)
    multi = TextClassifier(model=str(teacher["enc"]), epochs=1, multi_label=True, eval_fraction=0,
                           progress=False).fit(TEXTS[:10], ["a|b", "a", "b", "b", "a|b"] * 2)
    with pytest.raises(HeadswapError) as e:
        distill(multi, TEXTS, progress=False)
    assert "multi-label" in _one_line(e) and "single-label teachers only" in _one_line(e)
    # The command: one line, naming the problem, exit 2.
    multi_dir = multi.save(tmp_path / "multi")
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(TEXTS, LABELS)))
    (tmp_path / "empty.csv").write_text("text\n")
    (tmp_path / "eggs.csv").write_text("text,label\nwin,eggs\nhome,ham\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    base = ["distill", "--teacher", str(teacher["dir"]), "--data", str(tmp_path / "train.csv"), "-q"]
    for args, expected in [
        (["--teacher", str(multi_dir), "--out", str(tmp_path / "o")], "single-label teachers only"),
        (["--data", str(tmp_path / "eggs.csv"), "--out", str(tmp_path / "o")], "labels the teacher does not know"),
        (["--unlabeled", str(tmp_path / "empty.csv"), "--out", str(tmp_path / "o")], "holds no texts"),
        (["--out", str(tmp_path / "full")], "is a directory that holds no saved model"),
        (["--label-weight", "2", "--out", str(tmp_path / "o")], "--label-weight"),
    ]:
        rc, err = _main(*base, *args)
        lines = [line for line in err.splitlines() if line.strip()]
        assert rc == 2 and len(lines) == 1 and expected in lines[0], err
    assert not (tmp_path / "o").exists() and (tmp_path / "full" / "notes.txt").read_text() == "mine"


# ---- the static student (TextClassifier(strategy="static") fitted on the soft targets) ----------------------

STATIC = dict(epochs=30, batch_size=8, head_lr=1e-2, eval_fraction=0, seed=0)


@pytest.fixture(scope="module")
def static_cache(tmp_path_factory):
    pytest.importorskip("model2vec")
    mp = pytest.MonkeyPatch()
    mp.setenv("HEADSWAP_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


def test_the_static_student_learns_the_teachers_answers(teacher, static_cache, tmp_path):
    clf = teacher["clf"]
    student = distill(clf, TEXTS, NOISY, unlabeled=UNLABELLED, progress=False, student="static",
                      student_params={"model": str(teacher["enc"]), **STATIC})
    assert isinstance(student, TextClassifier) and student.strategy == "static"
    assert student.labels_ == clf.labels_
    assert [student.predict([t])[0] for t in WRONG] == [LABELS[TEXTS.index(t)] for t in WRONG]
    record = student.distillation_
    assert record["student"] == "static" and record["agreement"] >= 0.9
    assert (record["texts"], record["unlabelled"], record["label_weight"]) == (30, len(UNLABELLED), 0.0)
    again = load_model(student.save(tmp_path / "student"), progress=False)
    assert isinstance(again, TextClassifier) and again.distillation_ == record
    np.testing.assert_allclose(again.predict_proba(TEXTS), student.predict_proba(TEXTS), atol=1e-6)
    # Refitting on labels drops the record, as the TF-IDF student's does.
    assert again.fit(TEXTS, LABELS).distillation_ is None
    # eval data with real labels picks the student's best epoch.
    picked = distill(clf, TEXTS, NOISY, progress=False, student="static", eval_texts=TEXTS, eval_labels=LABELS,
                     student_params={"model": str(teacher["enc"]), **STATIC, "epochs": 2})
    assert [h["score"] is not None for h in picked.history_] == [True, True]


def test_student_misuse_is_one_line(teacher):
    clf = teacher["clf"]
    enc = str(teacher["enc"])
    for kwargs, expected in [
        (dict(student="bert"), "unknown student 'bert'; choose one of tfidf, static"),
        (dict(student_params={"epochs": 2}), "settings of the static student"),
        (dict(eval_texts=TEXTS, eval_labels=LABELS), "the tfidf student has no epochs"),
        (dict(student="static", student_params={"model": enc, "strategy": "encoder-mlp"}), "strategy is 'static'"),
        (dict(student="static", student_params={"model": enc, "multi_label": True}), "single-label model"),
        (dict(student="static", student_params={"model": enc, "out_of_scope": "x"}), "single-label model"),
        (dict(student="static", student_params={"model": enc, "nope": 1}), "unknown settings ['nope']"),
        (dict(student="static", student_params={"model": enc, "regime": "lora"}), "no transformer blocks"),
    ]:
        with pytest.raises(HeadswapError) as e:
            distill(clf, TEXTS, LABELS, progress=False, **kwargs)
        assert expected in _one_line(e), str(e.value)


def test_the_command_trains_a_static_student(teacher, static_cache, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(TEXTS, NOISY)))
    (data / "validation.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(TEXTS, LABELS)))
    out = tmp_path / "student"
    rc, err = _main("distill", "--teacher", str(teacher["dir"]), "--data", str(data), "--student", "static",
                    "--model", str(teacher["enc"]), "--epochs", "30", "--batch-size", "8", "--head-lr", "0.01",
                    "--out", str(out), "-q")
    assert rc == 0, err
    assert "into static (" in err and "agrees with the teacher on 100.0% of the training texts" in err, err
    assert "macro F1 student 1.000, teacher 1.000" in err, err
    config = json.loads((out / "headswap_config.json").read_text())
    assert config["params"]["strategy"] == "static" and config["params"]["epochs"] == 30
    assert config["distillation"]["student"] == "static" and len(config["history"]) == 30
    assert config["distillation"]["teacher"] == str(teacher["dir"].resolve())
    r = _cli("predict", "--model-dir", str(out), "-q", *WRONG)
    assert r.returncode == 0, r.stderr
    assert [json.loads(line)["label"] for line in r.stdout.splitlines()] == [LABELS[TEXTS.index(t)] for t in WRONG]
    # The static student's settings without --student static: one line naming them.
    rc, err = _main("distill", "--teacher", str(teacher["dir"]), "--data", str(data), "--epochs", "2", "--seed", "1",
                    "--out", str(tmp_path / "o"), "-q")
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "--epochs, --seed set the static student; add --student static" in err, err
    rc, err = _main("distill", "--teacher", str(teacher["dir"]), "--data", str(data), "--student", "static",
                    "--model", str(teacher["enc"]), "--regime", "lora", "--out", str(tmp_path / "o"), "-q")
    assert rc == 2 and "no transformer blocks for regime 'lora'" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_distill_on_texts_without_a_two_letter_word(teacher, tmp_path, caplog):
    """Emoji-only and one-letter texts: the TF-IDF student (and auto's baseline) trained on character n-grams
    instead of stopping with scikit-learn's 'empty vocabulary' (issue 33)."""
    from headswap.data.once import _warned
    _warned.discard(("tfidf", "no words"))      # printed once per process: an earlier test may have seen it
    texts = ["😀", "😀😀", "a 😀", "😡", "😡😡", "b 😡"] * 4
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(
        f"{t},{y}\n" for t, y in zip(texts, ["ham", "ham", "ham", "spam", "spam", "spam"] * 4)))
    with caplog.at_level("WARNING"):
        rc, err = _main("distill", "--teacher", str(teacher["dir"]), "--data", str(tmp_path / "train.csv"),
                        "--out", str(tmp_path / "s"), "-q")
    assert rc == 0, err
    assert "character n-grams only" in caplog.text
    student = load_model(tmp_path / "s")
    assert list(student.predict(["😀😀"])) in (["ham"], ["spam"])
