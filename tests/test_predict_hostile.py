"""Hostile model directories and careless use of `headswap predict` (issue 23's probe): a model directory never
makes headswap go online or read outside itself, --resume never mixes two models' predictions, and the rest is
one line on stderr, exit 2, nothing changed; never a traceback."""

from __future__ import annotations

import ast
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading

import pytest
from cli_run import signalled
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.cli.parser import main

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home"] * 3
LABELS = ["spam", "spam", "ham", "ham"] * 3
HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("predict-hostile")
    enc = make_tiny_encoder(root / "enc")
    out = {"root": root, "enc": enc}
    for name, seed in (("a", 0), ("b", 1)):
        clf = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0, seed=seed)
        out[name] = clf.fit(TEXTS, LABELS).save(root / name)
    return out


@pytest.fixture(scope="module")
def exported(models):
    pytest.importorskip("onnxruntime")
    from headswap.jobs.export import export
    export(models["a"], models["root"] / "a-onnx")
    return models["root"] / "a-onnx"


def _copy(src, dst, **export):
    shutil.copytree(src, dst)
    if export:
        config = json.loads((dst / "headswap_config.json").read_text())
        config["export"].update(export)
        (dst / "headswap_config.json").write_text(json.dumps(config))
    return dst


def _cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


# ---- 1. nothing goes online, nothing outside the directory is read -------------------------------------------

class _Trap:
    """A local stand-in for the Hub: counts the connections made to it and drops each at once."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.hits = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            conn.close()

    @property
    def env(self) -> dict:
        # Offline mode off and an empty cache: any Hub look-up would have to come here.
        return {**os.environ, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0", "HF_ENDPOINT":
                f"http://127.0.0.1:{self.sock.getsockname()[1]}", "HF_HUB_ETAG_TIMEOUT": "2",
                "HF_HUB_DOWNLOAD_TIMEOUT": "2"}


def test_the_trap_sees_a_hub_lookup(tmp_path):
    """The check below can fail: a from_pretrained of a hub id without local_files_only reaches the trap."""
    trap = _Trap()
    subprocess.run([sys.executable, "-c", f"from transformers import AutoTokenizer; "
                    f"AutoTokenizer.from_pretrained({HUB_ID!r})"], capture_output=True, timeout=300,
                   env={**trap.env, "HF_HOME": str(tmp_path / "hf")})
    assert trap.hits > 0


def test_a_model_directory_never_goes_online_or_outside_itself(models, exported, tmp_path):
    d = tmp_path / "dirs"
    d.mkdir()
    outside = str(models["enc"])     # a real tokenizer folder, so only the containment check refuses it
    cases = {     # model directory -> what its one line must say
        _copy(exported, d / "no-tokenizer"): "tokenizer is missing; the exported model directory is incomplete",
        _copy(exported, d / "hub-id", tokenizer=HUB_ID): "is missing; the exported model directory is incomplete",
        _copy(exported, d / "dotdot", tokenizer=f"../../../{models['enc'].name}"):
            f"export.tokenizer names '../../../{models['enc'].name}', which is outside the model directory",
        _copy(exported, d / "absolute", tokenizer=outside):
            f"export.tokenizer names {outside!r}, which is outside the model directory",
        _copy(exported, d / "graph", file=str(exported / "model.onnx")):
            "export.file names", }
    shutil.rmtree(d / "no-tokenizer" / "tokenizer")
    torch_dir = _copy(models["a"], d / "torch-hub-base")
    config = json.loads((torch_dir / "headswap_config.json").read_text())
    config["base_model"] = {**config["base_model"], "ref": HUB_ID}     # the base model named by hub id
    (torch_dir / "headswap_config.json").write_text(json.dumps(config))
    cases[torch_dir] = HUB_ID
    script = ("import contextlib, io, sys\nfrom headswap.cli.parser import main\nfor d in sys.argv[1:]:\n"
              "    err = io.StringIO()\n    with contextlib.redirect_stderr(err):\n"
              "        code = main(['predict', '-q', '--model-dir', d, 'a text'])\n"
              "    print(code, repr(err.getvalue()))\n")
    trap = _Trap()
    r = subprocess.run([sys.executable, "-c", script, *map(str, cases)], capture_output=True, text=True,
                       timeout=300, env={**trap.env, "HF_HOME": str(tmp_path / "hf")})
    assert r.returncode == 0, r.stderr
    results = r.stdout.splitlines()
    assert len(results) == len(cases), r.stdout + r.stderr
    for (model, expected), line in zip(cases.items(), results):
        code, err = line.split(" ", 1)
        assert code == "2", (model, line)
        assert expected in _one_line(ast.literal_eval(err)), (model, line)
    assert trap.hits == 0


def test_an_export_whose_config_lost_the_graph_checksum_is_refused(exported, tmp_path, capsys):
    config = json.loads((exported / "headswap_config.json").read_text())
    d = _copy(exported, tmp_path / "x")
    config["export"].pop("sha256")
    (d / "headswap_config.json").write_text(json.dumps(config))
    code, out, err = _cli(capsys, "predict", "-q", "--model-dir", str(d), "a text")
    assert code == 2 and out == ""
    assert "export.sha256 (the graph's checksum) is missing" in _one_line(err)


# ---- 2. --resume continues only the same model's predictions -------------------------------------------------

@pytest.fixture
def half_done(models, tmp_path, capsys):
    """Predictions of model a for 10 rows, cut after 4 as a kill would leave them."""
    data = tmp_path / "d.csv"
    data.write_text("text\n" + "".join(f"text {i}\n" for i in range(10)))
    out = tmp_path / "p.jsonl"
    assert _cli(capsys, "predict", "-q", "--model-dir", str(models["a"]), "--data", str(data), "--out", str(out))[0] == 0
    full = out.read_text().splitlines(keepends=True)
    out.write_text("".join(full[:4]))
    return data, out, full


def _resume(capsys, model, data, out):
    return _cli(capsys, "predict", "-q", "--model-dir", str(model), "--data", str(data), "--out", str(out), "--resume")


def test_resume_with_another_models_weights_is_refused(models, half_done, tmp_path, capsys):
    """Same config bytes, other weights: the fingerprint reads the weights, not sizes or times."""
    data, out, _ = half_done
    twin = _copy(models["a"], tmp_path / "twin")
    shutil.copy(models["b"] / "model.safetensors", twin / "model.safetensors")
    assert (twin / "model.safetensors").stat().st_size == (models["a"] / "model.safetensors").stat().st_size
    before = out.read_bytes()
    code, _, err = _resume(capsys, twin, data, out)
    line = _one_line(err)
    assert code == 2 and "was written by another model" in line and f"not --model-dir {twin}" in line
    assert json.loads(before.splitlines()[0])["model"] in line       # both fingerprints named
    assert out.read_bytes() == before


def test_resume_with_a_copy_of_the_same_model_continues(models, half_done, tmp_path, capsys):
    """The fingerprint is of the contents: the same model moved or copied elsewhere is the same model."""
    data, out, full = half_done
    moved = _copy(models["a"], tmp_path / "moved")
    code, _, err = _resume(capsys, moved, data, out)
    assert code == 0, err
    assert out.read_text().splitlines(keepends=True) == full


def test_resume_with_a_missing_model_names_the_model_not_another_one(half_done, tmp_path, capsys):
    data, out, _ = half_done
    before = out.read_bytes()
    code, _, err = _resume(capsys, tmp_path / "no-such-model", data, out)
    line = _one_line(err)
    assert code == 2 and "no-such-model" in line and "another model" not in line
    assert out.read_bytes() == before


def test_resume_of_predictions_written_before_fingerprints_continues(models, half_done, capsys, caplog):
    """Files written by an older headswap stay usable: continued, with a warning that the model is unchecked."""
    data, out, full = half_done
    old = [json.loads(x) for x in out.read_text().splitlines()]
    out.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "model"}, ensure_ascii=False) + "\n"
                           for r in old))
    with caplog.at_level(logging.WARNING):
        code, _, err = _resume(capsys, models["a"], data, out)
    assert code == 0, err
    assert "without model fingerprints" in caplog.text
    assert out.read_text().splitlines(keepends=True)[4:] == full[4:]


# ---- 3. the rest: one line, or a quiet exit -------------------------------------------------------------------

def test_out_under_a_file_says_it_is_not_a_folder(models, tmp_path, capsys):
    (tmp_path / "f").write_text("a file")
    code, out, err = _cli(capsys, "predict", "--model-dir", str(models["a"]), "--out", str(tmp_path / "f" / "p.jsonl"),
                          "hi")
    assert code == 2 and f"the folder {tmp_path / 'f'} is not a folder" in _one_line(err)
    assert (tmp_path / "f").read_text() == "a file"


def test_a_reader_that_goes_away_ends_predict_quietly_with_sigpipes_status(models):
    """The pipe is closed after two lines while predict still has chunks to write: exit 141 (128 + SIGPIPE, what
    a shell reports for `yes | head`), no traceback, and nothing about stdout at interpreter exit."""
    texts = [f"text number {i}" for i in range(400)]
    p = subprocess.Popen([sys.executable, "-m", "headswap.cli", "predict", "-q", "--chunk-size", "4",
                          "--model-dir", str(models["a"]), *texts], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = [p.stdout.readline(), p.stdout.readline()]
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 141, err
    assert all(json.loads(x)["row"] in (1, 2) for x in first)
    assert err == "", err


# ---- 4. stopped from outside: SIGTERM, SIGKILL, another writer -------------------------------------------------

def _rows(path) -> list[int]:
    return [json.loads(x)["row"] for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_predict_stopped_mid_run_keeps_its_rows_and_resume_continues(models, tmp_path, capsys, sig):
    """predict reads standard input a row at a time and waits for a third: stopped there, SIGTERM (a CI cancel,
    `timeout`) ends it as Ctrl-C does, exit 143 with the lock file removed; SIGKILL removes nothing, and the lock
    it leaves does not stop the rerun. Either way --resume continues after the two complete rows."""
    out = tmp_path / "p.jsonl"
    rc, err = signalled(["predict", "-q", "--chunk-size", "1", "--model-dir", str(models["a"]), "--out", str(out)],
                        lambda err: len(_rows(out)) == 2, sig, stdin="one\ntwo\n")
    if sig == signal.SIGTERM:
        assert rc == 143 and err.strip().splitlines()[-1] == "terminated (SIGTERM)" and "Traceback" not in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl"]
    else:
        assert rc == -signal.SIGKILL
    code, _, err = _cli(capsys, "predict", "-q", "--model-dir", str(models["a"]), "--out", str(out), "--resume",
                        "one", "two", "three")
    assert code == 0, err
    assert _rows(out) == [1, 2, 3] and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_another_predict_into_the_same_file_is_told_to_give_another_file(models, tmp_path, capsys):
    from headswap.saved.atomic import output_lock
    out = tmp_path / "p.jsonl"
    with output_lock(out, kind="file"):
        code, _, err = _cli(capsys, "predict", "--model-dir", str(models["a"]), "--out", str(out), "hi")
    line = _one_line(err)
    assert code == 2 and line.endswith("wait for it to finish or give another file") and not out.exists()


def test_out_through_a_symlink_writes_the_file_it_points_to(models, tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    (tmp_path / "p.jsonl").symlink_to(real / "p.jsonl")          # a link to a file not yet there
    for out in (tmp_path / "link" / "q.jsonl", tmp_path / "p.jsonl"):
        code, _, err = _cli(capsys, "predict", "-q", "--model-dir", str(models["a"]), "--out", str(out), "hi", "yo")
        assert code == 0, err
    assert _rows(real / "q.jsonl") == _rows(real / "p.jsonl") == [1, 2]
    assert (tmp_path / "p.jsonl").is_symlink() and sorted(p.name for p in real.iterdir()) == ["p.jsonl", "q.jsonl"]
