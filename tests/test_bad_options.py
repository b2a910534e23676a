"""Every option of every command, given bad values: exit code 2 and one line on stderr that names the option
(or the bad value), no traceback, and nothing trained, served or benchmarked.

The cases are generated from the parsers themselves, so a new option is covered the day it is added: a
numeric option gets non-numbers, NaN, infinity and a value past its bound (a setting's bound comes from
headswap.settings; any other numeric option must have its out-of-range values in OUT_OF_RANGE), an option with
choices gets an unknown choice, and a free-text option must appear in TEXT_CASES (or in NO_BAD_VALUE with the
reason). test_every_option_is_covered fails for an option that is in none of them.
"""

from __future__ import annotations

import argparse
import io
import sys
from contextlib import redirect_stderr, redirect_stdout

import pytest
from cli_run import free_port
from tiny_models import make_tiny_encoder

from headswap import TextClassifier, settings
from headswap.cli import options
from headswap.cli.parser import build_parser, main

pytestmark = pytest.mark.usefixtures("one_thread")

# Numeric options that are not settings: values past their bounds.
OUT_OF_RANGE = {
    "--train-limit": ["0", "-5"], "--test-limit": ["0"], "--limit": ["0"], "--chunk-size": ["0"],
    "--port": ["70000", "-1"], "--max-batch-size": ["0"], "--max-wait-ms": ["-1"], "--max-texts": ["0"],
    "--max-text-chars": ["0"], "--max-body-bytes": ["0"], "--threads": ["0"], "--max-concurrent-per-client": ["-1"],
    "--max-explain-texts": ["0"], "--max-explain-text-chars": ["0"], "--max-explain-steps": ["1"],
    "--pretrain-epochs": ["0"], "--epoch-scale": ["0", "-1"], "--seed": [],
    "--label-weight": ["-0.1", "1.5"], "--budget": ["0", "0m", "20x"], "--read-timeout": ["0", "-1"],
    "--concurrency": ["0", "-2"], "--arm-cpus": ["0", "-1"], "--arm-gpus": ["-1"],
    "--folds": ["1", "0"], "--test-fraction": ["0", "1", "1.5", "-0.2"], "-n": ["0", "-3"],
    "--top": ["0"], "--steps": ["1"],
}
# Free-text options: (command, flag) -> bad values. {file} is an existing file, {dir} an existing directory.
TEXT_CASES = {
    ("train", "--data"): ["nope.csv"], ("train", "--eval-data"): ["nope.csv"], ("train", "--test-data"): ["nope.csv"],
    ("train", "--text-column"): ["nosuch"], ("train", "--label-column"): ["nosuch"], ("train", "--out"): ["{file}", "{full}"],
    ("train", "--model"): ["no-such-model"], ("train", "--prompt"): ["@missing-prompt.txt"],
    ("train", "--descriptions"): ["missing-descriptions.csv"], ("train", "--class-weight"): ["balance", "w.csv"],
    ("train", "--label-separator"): [""], ("train", "--out-of-scope"): [""],
    ("train", "--init-from"): ["nope", "{dir}", "{file}"],
    ("eval", "--model-dir"): ["nope"], ("eval", "--data"): ["nope.csv"], ("eval", "--text-column"): ["nosuch"],
    ("eval", "--label-column"): ["nosuch"], ("eval", "--out"): ["{file}"],
    ("predict", "--model-dir"): ["nope"], ("predict", "--data"): ["nope.csv"], ("predict", "--text-column"): ["nosuch"],
    ("predict", "--out"): ["{dir}"],
    ("bench", "--data"): ["nope"], ("bench", "--model"): ["no-such-model"], ("bench", "--strategies"): ["bogus"],
    ("bench", "--text-column"): ["nosuch"], ("bench", "--label-column"): ["nosuch"],
    ("auto", "--text-column"): ["nosuch"], ("auto", "--label-column"): ["nosuch"],
    ("bench", "--out"): ["{file}"], ("bench", "--prompt"): ["@missing-prompt.txt"],
    ("bench", "--descriptions"): ["missing-descriptions.csv"], ("bench", "--class-weight"): ["missing.json"],
    ("bench", "--out-of-scope"): [""],
    ("serve", "--model-dir"): ["nope"], ("serve", "--api-key"): [""], ("serve", "--host"): ["999.1.1.1", "192.0.2.1"],
    ("auto", "--data"): ["nope"], ("auto", "--model"): ["no-such-model"], ("auto", "--strategies"): ["bogus"],
    ("auto", "--out"): ["{file}"], ("auto", "--prompt"): ["@missing-prompt.txt"],
    ("auto", "--descriptions"): ["missing-descriptions.csv"], ("auto", "--class-weight"): ["missing.json"],
    ("auto", "--out-of-scope"): [""], ("auto", "--ray-address"): ["127.0.0.1:1"],
    ("auto", "--prior"): ["nope.json", "{dir}", "{file}"],
    ("export", "--model-dir"): ["nope", "{dir}"], ("export", "--out"): ["{file}"],
    ("distill", "--teacher"): ["nope", "{dir}"], ("distill", "--data"): ["nope"],
    ("distill", "--unlabeled"): ["nope.csv"], ("distill", "--text-column"): ["nosuch"],
    ("distill", "--label-column"): ["nosuch"], ("distill", "--out"): ["{file}", "{full}"],
    ("distill", "--model"): ["no-such-model"],
    ("demo", "--json"): ["{dir}"], ("demo", "--data"): ["{dir}", "{file}", "{dir}/no-folder/spam.csv"],
    ("audit", "--data"): ["nope"], ("audit", "--text-column"): ["nosuch"], ("audit", "--label-column"): ["nosuch"],
    ("audit", "--out"): ["{file}"], ("audit", "--model"): ["no-such-model"],
    ("audit", "--prompt"): ["@missing-prompt.txt"], ("audit", "--descriptions"): ["missing-descriptions.csv"],
    ("audit", "--class-weight"): ["missing.json"], ("audit", "--out-of-scope"): [""],
    ("suggest", "--data"): ["nope.csv"], ("suggest", "--labelled"): ["nope.csv"],
    ("suggest", "--text-column"): ["nosuch"], ("suggest", "--out"): ["{file}"],
    ("explain", "--data"): ["nope.csv"], ("explain", "--text-column"): ["nosuch"], ("explain", "--html"): ["{dir}"],
}
NO_BAD_VALUE: dict = {
    ("explain", "--label"): "checked against the model's classes by explain() itself, after the model loads "
                            "(tests/test_explain.py)",
}


class Started(Exception):
    """Raised by the patched entry points: a bad value got as far as training, benchmarking or serving."""


def _options():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, p in sub.choices.items():
        for action in p._actions:
            if action.option_strings and action.nargs != 0 and not isinstance(action, argparse._HelpAction):
                yield command, action


def _numeric(action) -> bool:
    """Options with a parsing type are numeric, except the non-empty text ones."""
    return action.type is not None and action.type is not options._nonempty


def _setting_bounds(flag: str) -> list[str]:
    for f in settings.all_fields():
        if settings.flag_of(f) == flag and settings.is_numeric(f):
            m, whole = f.metadata, settings.is_whole(f)
            out = []
            if m.get("minimum") is not None:
                out.append(str(int(m["minimum"]) - 1) if whole else str(m["minimum"] - 0.5))
            if m.get("above") is not None:
                out.append(str(m["above"]))
            if m.get("below") is not None:
                out.append(str(m["below"]))
            if m.get("maximum") is not None:
                out.append(str(m["maximum"] + 1))
            return out
    return None


def _cases():
    for command, action in _options():
        flag = action.option_strings[-1]
        if action.choices is not None:
            values = ["bogus-choice"]
        elif _numeric(action):
            bounds = _setting_bounds(flag)
            values = ["abc", "nan", "inf"] + (bounds if bounds is not None else OUT_OF_RANGE.get(flag, []))
        else:
            values = TEXT_CASES.get((command, flag), [])
        for value in values:
            yield pytest.param(command, flag, value, id=f"{command} {flag} {value!r}")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-options")
    enc = make_tiny_encoder(root / "enc")
    data = root / "data"
    data.mkdir()
    rows = "text,label\n" + "".join(f"message {i} {'win cash' if i % 2 else 'see you'},{'ab'[i % 2]}\n"
                                    for i in range(24))
    for split in ("train", "validation", "test"):
        (data / f"{split}.csv").write_text(rows)
    model = TextClassifier(model=str(enc), epochs=1, progress=False).fit(["win cash", "see you"] * 6,
                                                                         ["b", "a"] * 6).save(root / "model")
    (root / "a-file").write_text("x")
    (root / "a-dir").mkdir()
    (root / "full-dir").mkdir()        # someone's folder: saving a model over it would delete it
    (root / "full-dir" / "notes.txt").write_text("keep me")
    return {"enc": str(enc), "data": str(data), "model": str(model), "file": str(root / "a-file"),
            "dir": str(root / "a-dir"), "full": str(root / "full-dir"), "out": str(root / "out")}


def _base(command: str, w: dict) -> list[str]:
    return {
        "demo": ["demo", "-q"],
        "train": ["train", "--data", w["data"], "--model", w["enc"], "--out", w["out"], "-q"],
        "eval": ["eval", "--model-dir", w["model"], "--data", w["data"], "-q"],
        "predict": ["predict", "--model-dir", w["model"], "--data", w["data"] + "/test.csv", "-q"],
        "bench": ["bench", "--data", w["data"], "--model", w["enc"], "--strategies", "encoder-mlp", "--out", w["out"],
                  "-q"],
        "auto": ["auto", "--data", w["data"], "--budget", "1m", "--model", w["enc"], "--strategies", "encoder-mlp",
                 "--out", w["out"], "-q"],
        "serve": ["serve", "--model-dir", w["model"], "--port", str(free_port())],
        "export": ["export", "--model-dir", w["model"], "--out", w["out"]],
        "distill": ["distill", "--teacher", w["model"], "--data", w["data"], "--out", w["out"], "-q"],
        "audit": ["audit", "--data", w["data"], "--strategy", "encoder-mlp", "--model", w["enc"], "--out", w["out"],
                  "-q"],
        "suggest": ["suggest", w["model"], "--data", w["data"] + "/test.csv", "--out", w["out"], "-n", "3", "-q"],
        "explain": ["explain", w["model"], "--data", w["data"] + "/test.csv", "-q"],
    }[command]


@pytest.fixture
def guarded(monkeypatch):
    import uvicorn

    import headswap.auto.main
    import headswap.bench.run
    import headswap.jobs.distill
    import headswap.explain
    import headswap.jobs.export
    import headswap.jobs.label_audit
    import headswap.classifier.suggest
    import headswap.teach.demo

    def started(*a, **kw):
        raise Started("a bad option value was accepted and the work started")

    monkeypatch.setattr(TextClassifier, "fit", started)
    monkeypatch.setattr(headswap.bench.run, "run_bench", started)
    monkeypatch.setattr(headswap.auto.main, "auto", started)
    monkeypatch.setattr(headswap.teach.demo, "run_demo", started)
    monkeypatch.setattr(headswap.jobs.export, "_write", started)
    monkeypatch.setattr(headswap.jobs.distill, "distill", started)
    monkeypatch.setattr(headswap.jobs.label_audit, "audit_data", started)
    monkeypatch.setattr(headswap.classifier.suggest, "suggest", started)
    monkeypatch.setattr(headswap.explain, "explain", started)
    monkeypatch.setattr(uvicorn, "run", started)


def invoke(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
    return rc, err.getvalue()


@pytest.mark.parametrize("command, flag, value", list(_cases()))
def test_a_bad_value_is_one_line_naming_the_option(world, guarded, command, flag, value):
    value = value.format(**world)
    rc, err = invoke(_base(command, world) + [flag, value])
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, err
    assert "Traceback" not in err
    assert len(lines) == 1, err
    assert flag in lines[0] or (value and value in lines[0]), lines[0]


def test_last_n_beyond_the_models_blocks_is_refused_before_loading_it(world, guarded):
    rc, err = invoke(_base("train", world) + ["--regime", "partial", "--last-n", "3"])
    assert rc == 2 and err.strip().endswith("has 2 blocks; the partial regime trains 1 to 2 of them"), err
    assert err.startswith("headswap train: error: --last-n 3")


def test_an_option_that_needs_another_is_refused_without_it(world, guarded):
    """--arm-cpus and --arm-gpus size the arms' Ray tasks: without --ray-address they were ignored without a word
    (their default values given too)."""
    for extra in (["--arm-cpus", "4"], ["--arm-gpus", "0"], ["--arm-cpus", "1"]):
        rc, err = invoke(_base("auto", world) + extra)
        lines = [line for line in err.splitlines() if line.strip()]
        assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith(f"headswap auto: error: {extra[0]} ") and "needs --ray-address" in lines[0]


def test_every_option_is_covered():
    missing = []
    for command, action in _options():
        flag = action.option_strings[-1]
        if action.choices is not None or (command, flag) in NO_BAD_VALUE:
            continue
        if _numeric(action):
            if _setting_bounds(flag) is None and flag not in OUT_OF_RANGE:
                missing.append(f"{command} {flag} (numeric: add its out-of-range values to OUT_OF_RANGE)")
        elif (command, flag) not in TEXT_CASES:
            missing.append(f"{command} {flag} (add bad values to TEXT_CASES or a reason to NO_BAD_VALUE)")
    assert not missing, missing


def test_the_base_command_lines_are_valid(world, guarded):
    """Each bad-value case is its command's valid base line plus one bad option: the base itself must get as
    far as the work (here: the patched entry point), or predict/eval must succeed."""
    for command in ("train", "bench", "auto", "serve", "demo", "distill", "audit", "suggest", "explain"):
        with pytest.raises(Started):
            invoke(_base(command, world))
    for command in ("eval", "predict"):
        rc, err = invoke(_base(command, world))
        assert rc == 0, err


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
