"""Every command that writes keeps the user's files (issue 66, headswap.saved.outputs): a path holding a file that
headswap did not write, an input of the same command, or a place inside a saved model's folder is refused in one
line (exit 2) and left byte for byte as it was; what headswap wrote there itself is written again by a rerun."""

from __future__ import annotations

import os

import pytest
from cli_run import invoke

from headswap.baseline.tfidf import TfidfClassifier
from headswap.cli.parser import COMMANDS
from headswap.errors import HeadswapError

TEXTS = ["win cash now", "free prize call now", "see you at noon", "ok on my way home", "urgent you have won",
         "running late sorry"] * 4
LABELS = ["spam", "spam", "ham", "ham", "spam", "ham"] * 4
MINE = b"the user's own bytes\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("outputs")
    data = root / "d.csv"
    data.write_text("text,label\n" + "".join(f"{t} {i},{y}\n" for i, (t, y) in enumerate(zip(TEXTS, LABELS))))
    pool = root / "pool.csv"
    pool.write_text("text\n" + "".join(f"another {t} {i}\n" for i, t in enumerate(TEXTS)))
    model = TfidfClassifier().fit(TEXTS, LABELS).save(root / "m")
    return {"root": root, "data": data, "pool": pool, "model": model}


# Each command that writes: its command line with OUT left as "{out}", and what it writes there (for a folder, the
# names of its files; for a file, None). Commands that write nothing: NO_OUTPUT.
WRITERS = {
    "demo": (["demo", "-q", "--json", "{out}"], None),
    "train": (["train", "--data", "{data}", "--model", "minilm", "-q", "--out", "{out}"], ["README.md"]),
    "eval": (["eval", "-q", "--model-dir", "{model}", "--data", "{data}", "--out", "{out}"],
             ["metrics.json", "confusion_matrix.png", "reliability_diagram.png", "per_label_f1.png",
              "oos_scores.png"]),
    "predict": (["predict", "-q", "--model-dir", "{model}", "--data", "{pool}", "--out", "{out}"], None),
    "explain": (["explain", "{model}", "free prize", "--html", "{out}"], None),
    "export": (["export", "--model-dir", "{model}", "--out", "{out}"], ["README.md"]),
    "distill": (["distill", "--teacher", "{model}", "--data", "{data}", "-q", "--out", "{out}"], ["README.md"]),
    "bench": (["bench", "--data", "{data}", "--strategies", "encoder-mlp", "-q", "--out", "{out}"],
              ["results.json", "results.md", "report.html"]),
    "auto": (["auto", "--data", "{data}", "--budget", "30s", "-q", "--out", "{out}"],
             ["results.json", "results.md", "report.html"]),
    "audit": (["audit", "--data", "{data}", "-q", "--out", "{out}"],
              ["label_issues.csv", "near_duplicates.csv", "audit.json", "audit.html"]),
    "suggest": (["suggest", "{model}", "--data", "{pool}", "-n", "2", "-q", "--out", "{out}"],
                ["to_label.csv", "label_studio.json", "label_studio_config.xml", "suggest.json"]),
}
NO_OUTPUT = {"serve", "models"}


def argv(world, command: str, out) -> list[str]:
    return [a.format(out=out, **world) for a in WRITERS[command][0]]


def refused(args) -> str:
    """The one line of a refused command (exit 2, no traceback)."""
    rc, _, err = invoke(args)
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err)
    return lines[0]


def snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def test_every_command_is_walked():
    assert set(WRITERS) | NO_OUTPUT == set(COMMANDS)


# (command, name) for every output of every command: the user's file there (name None: the output is a file)
OUTPUTS = [(c, n) for c, (_, names) in WRITERS.items() for n in (names or [None])]


@pytest.mark.parametrize("command,name", OUTPUTS)
def test_a_users_file_where_a_command_writes_is_refused_and_kept(world, tmp_path, command, name):
    place = tmp_path / "place"
    if name is None:
        place.write_bytes(MINE)
    else:
        place.mkdir()
        (place / name).write_bytes(MINE)
    before = snapshot(tmp_path)
    line = refused(argv(world, command, place))
    assert str(place) in line
    assert snapshot(tmp_path) == before       # the user's bytes, and nothing new beside them (no lock, no manifest)


@pytest.mark.parametrize("command", list(WRITERS))
def test_nothing_is_written_inside_a_saved_models_folder(world, tmp_path, command):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(world["model"], model)
    names = WRITERS[command][1]
    if names is None:       # a file of the model's own (a new name would be refused too)
        place = model / "headswap_config.json"
    elif names == ["README.md"]:    # a model's --out: a new folder in another model's folder
        place = model / "sub"
    else:
        place = model
    before = snapshot(tmp_path)
    line = refused(argv(world, command, place))
    assert f"saved model {model}" in line or "saved model's folder" in line, line
    assert snapshot(tmp_path) == before
    TfidfClassifier.load(model)      # still loads


def test_explain_into_the_models_config_is_refused_and_the_model_still_loads(world):
    config = world["model"] / "headswap_config.json"
    before = config.read_bytes()
    line = refused(["explain", str(world["model"]), "free prize", "--html", str(config)])
    assert line.endswith(f"--html {config} is inside the saved model {world['model']}, which holds only what the "
                         f"model's save wrote: give a path outside it")
    assert config.read_bytes() == before
    assert TfidfClassifier.load(world["model"]).predict(["free prize"]).shape == (1,)


def test_an_input_is_never_an_output(world, tmp_path):
    texts = tmp_path / "p.csv"
    texts.write_text("text\nfree prize\nsee you\n")
    link = tmp_path / "same.csv"
    os.link(texts, link)                                  # a hard link is the same file under another name
    before = texts.read_bytes()
    for page in (texts, link):
        line = refused(["explain", str(world["model"]), "--data", str(texts), "--html", str(page)])
        assert f"--html {page} is the input file --data {texts}; writing it would replace the input" in line
    assert texts.read_bytes() == before
    # suggest --labelled a file that suggest wrote into OUT earlier (unchanged since, so headswap's own)
    out = tmp_path / "s"
    assert invoke(argv(world, "suggest", out))[0] == 0
    labelled = out / "to_label.csv"
    before = labelled.read_bytes()
    line = refused([*argv(world, "suggest", out), "--labelled", str(labelled)])
    assert f"writing to_label.csv there would replace the input file --labelled {labelled}" in line
    assert labelled.read_bytes() == before


def test_train_init_from_the_same_folder_is_refused(world, tmp_path):
    before = snapshot(world["model"])
    line = refused(["train", "--data", str(world["data"]), "--init-from", str(world["model"]), "--out",
                    str(world["model"]), "-q"])
    assert line.endswith(f"--out {world['model']} is the model --init-from {world['model']}; saving would replace "
                         f"it: give a new --out")
    assert snapshot(world["model"]) == before


@pytest.mark.parametrize("command", ["suggest", "eval", "audit", "explain"])
def test_a_rerun_writes_over_what_headswap_wrote_but_not_over_a_users_file(world, tmp_path, command):
    out = tmp_path / ("why.html" if command == "explain" else "out")
    for _ in range(2):
        rc, _, err = invoke(argv(world, command, out))
        assert rc == 0, err
    if command == "explain":    # a single file is headswap's while it holds its mark: another page is refused
        out.write_bytes(b"<!doctype html><html><body>my page</body></html>")
    else:                       # a file in a folder is headswap's while unchanged: e.g. labels typed into to_label.csv
        changed = out / WRITERS[command][1][0]
        changed.write_bytes(changed.read_bytes() + b"my edit\n")
    before = snapshot(tmp_path)
    line = refused(argv(world, command, out))
    assert ("which headswap did not write (or which changed since it did)" in line
            or "is a file that headswap did not write" in line), line
    assert snapshot(tmp_path) == before


def test_the_library_writers_keep_the_users_files(world, tmp_path):
    from headswap.classifier.suggest import suggest
    from headswap.jobs.label_audit import audit

    result = suggest(TfidfClassifier.load(world["model"]), [f"another {t}" for t in TEXTS[:6]], 2)
    out = tmp_path / "out"
    out.mkdir()
    (out / "to_label.csv").write_bytes(MINE)
    with pytest.raises(HeadswapError, match="holds to_label.csv, which headswap did not write"):
        result.write(out)
    assert (out / "to_label.csv").read_bytes() == MINE
    (out / "to_label.csv").unlink()
    result.write(out)
    result.write(out)       # its own files, written again
    (out / "audit.html").write_bytes(MINE)
    with pytest.raises(HeadswapError, match="holds audit.html, which headswap did not write"):
        audit(TEXTS, LABELS, folds=2).write(out)
    assert (out / "audit.html").read_bytes() == MINE


def test_demo_json_is_written_again_but_never_over_another_file(tmp_path):
    from headswap.saved.outputs import JSON_MARK, check_file
    from headswap.teach.demo import write_json

    path = tmp_path / "demo.json"
    write_json({"results": {}, "total_seconds": 1.0}, path)
    assert JSON_MARK in path.read_text()
    check_file("--json", path, mark=JSON_MARK)      # its own file: a rerun may replace it
    path.write_text('{"results": {}}')
    with pytest.raises(HeadswapError, match="is a file that headswap did not write"):
        check_file("--json", path, mark=JSON_MARK)


def test_a_models_save_from_python_keeps_a_folder_of_the_users_files(world, tmp_path):
    """TextClassifier.save(".") in a project folder once wrote its model card over the project's README.md; every
    save() now refuses a folder holding files but no saved model, and writes over a model it saved before."""
    from tiny_models import make_tiny_encoder

    from headswap import TextClassifier
    from headswap.baseline.blend import Blend

    tfidf = TfidfClassifier.load(world["model"])
    neural = TextClassifier(model=str(make_tiny_encoder(tmp_path / "enc")), epochs=1, max_length=16,
                            progress=False, eval_fraction=0).fit(TEXTS, LABELS)
    for name, model in (("tfidf", tfidf), ("neural", neural), ("blend", Blend([(neural, 0.5), (tfidf, 0.5)]))):
        project = tmp_path / f"project-{name}"
        project.mkdir()
        (project / "README.md").write_bytes(MINE)
        with pytest.raises(HeadswapError, match=r"holds no saved model \(it has README.md\); saving would replace it"):
            model.save(project)
        assert os.listdir(project) == ["README.md"] and (project / "README.md").read_bytes() == MINE
        model.save(tmp_path / f"saved-{name}")
        model.save(tmp_path / f"saved-{name}")      # over its own save: written again
        assert (tmp_path / f"saved-{name}" / "headswap_config.json").is_file()
