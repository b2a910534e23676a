"""A JSONL line that Python's JSON parser cannot read for reasons other than syntax (nesting past the recursion
limit, an integer past the 4,300-digit limit) is one DataError naming the file and line, in the loader, the
streaming reader and on the command line: never a RecursionError or ValueError traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from headswap.data.load import load_dataset, load_texts
from headswap.data.stream import iter_texts
from headswap.errors import DataError
from headswap.baseline.tfidf import TfidfClassifier

DEEP = "[" * 100_000 + "]" * 100_000
CASES = {"deep": ('{"text": ' + DEEP + ', "label": "a"}', "nested too deeply"),
         "long integer": ('{"text": "hi", "label": ' + "7" * 5000 + "}", "4300 digits")}


def _file(tmp_path, case):
    f = tmp_path / "d.jsonl"
    f.write_text('{"text": "fine", "label": "a"}\n' + CASES[case][0] + "\n")
    return f


@pytest.mark.parametrize("case", list(CASES))
def test_the_loader_names_file_and_line(tmp_path, case):
    f = _file(tmp_path, case)
    for read in (load_dataset, load_texts, lambda p: list(iter_texts(p))):
        with pytest.raises(DataError, match=f"{f}, line 2: .*{CASES[case][1]}"):
            read(f)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    texts = ["win cash now", "free prize", "see you at noon", "ok home"] * 2
    return TfidfClassifier().fit(texts, ["spam", "spam", "ham", "ham"] * 2).save(tmp_path_factory.mktemp("m") / "m")


@pytest.mark.parametrize("case", list(CASES))
def test_eval_predict_and_audit_on_the_command_line(tmp_path, model, case):
    f = _file(tmp_path, case)
    for args in (["eval", "--model-dir", str(model), "--data", str(f), "--out", str(tmp_path / "e")],
                 ["predict", "--model-dir", str(model), "--data", str(f), "--out", str(tmp_path / "p.jsonl")],
                 ["audit", "--data", str(f), "--out", str(tmp_path / "a")]):
        r = subprocess.run([sys.executable, "-m", "headswap.cli", *args, "-q"], capture_output=True, text=True)
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert r.returncode == 2 and "Traceback" not in r.stderr and len(lines) == 1, r.stderr
        assert f"{f}, line 2" in lines[0] and CASES[case][1] in lines[0], r.stderr
