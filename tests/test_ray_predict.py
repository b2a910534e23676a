"""`headswap predict --engine ray` and headswap.predictor: the same answers as the single-machine predict, in
input order, for CSV, JSONL and Parquet; no row lost or duplicated when a worker dies; a pickled predictor
carries no model; bad input is one line, exit 2. One local Ray (2 CPUs) for the whole module."""

from __future__ import annotations

import json
import logging
import os
import pickle
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")

import pyarrow.csv as pacsv  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from headswap import predictor  # noqa: E402
from headswap.jobs.batch import Predictor, predict_ray  # noqa: E402
from test_bad_options import invoke  # noqa: E402  (main with stderr captured: (exit code, stderr))
from headswap.baseline.tfidf import TfidfClassifier  # noqa: E402

HERE = Path(__file__).resolve().parent
WORDS = ["win", "cash", "now", "see", "you", "at", "noon", "free", "call", "me", "ok", "home"]
N = 103     # not a multiple of the batch size


def _texts(n):
    texts = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(2 + i % 5)) + f" {i}" for i in range(n)]
    texts[3] = 'free "cash", now'           # a quoted comma
    texts[5] = "café à midi? see you"       # not ASCII
    texts[8] = "see you\nat noon"           # a newline inside a CSV field
    return texts


@pytest.fixture(scope="module")
def ray_local(one_ray_at_a_time):
    """One Ray for the module. Its workers import this file's FailOnce, so tests/ goes on their PYTHONPATH."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent / "src")] + ([before] if before else []))
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray")
    train = ["win cash now", "free call now", "see you at noon", "ok home", "call me at home", "cash prize win"]
    clf = TfidfClassifier().fit(train * 3, ["spam", "spam", "ham", "ham", "ham", "spam"] * 3)
    model = clf.save(root / "model")
    texts = _texts(N)
    labels = ["x"] * N
    table = pa.table({"text": texts, "label": labels})
    pacsv.write_csv(table, root / "in.csv")
    (root / "in.jsonl").write_text("".join(json.dumps({"text": t, "label": "x"}, ensure_ascii=False) + "\n"
                                           for t in texts), encoding="utf-8")
    pq.write_table(table, root / "in.parquet")
    rc, err = invoke(["predict", "--model-dir", str(model), "--data", str(root / "in.csv"),
                      "--out", str(root / "local.jsonl"), "-q"])
    assert rc == 0, err
    local = [json.loads(line) for line in (root / "local.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["text"] for r in local] == texts
    return {"root": root, "model": str(model), "texts": texts, "local": local}


def read_back(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    opts = pacsv.ConvertOptions(column_types={"text": pa.string(), "label": pa.string()})
    return pacsv.read_csv(path, parse_options=pacsv.ParseOptions(newlines_in_values=True),
                          convert_options=opts).to_pylist()


def assert_same_as_local(rows: list[dict], world) -> None:
    assert [r["row_id"] for r in rows] == list(range(N))            # order kept, every row once
    assert [r["text"] for r in rows] == world["texts"]
    for r, want in zip(rows, world["local"]):
        assert r["label"] == want["label"]
        assert r["model"] == want["model"]
        for lab, p in want["probabilities"].items():
            assert abs(r[f"proba_{lab}"] - p) <= 1e-6, (r, want)


@pytest.mark.parametrize("src, dst", [("csv", "parquet"), ("jsonl", "jsonl"), ("parquet", "csv")])
def test_same_answers_as_local_predict_in_input_order(ray_local, world, src, dst):
    out = world["root"] / f"ray-{src}.{dst}"
    rc, err = invoke(["predict", "--model-dir", world["model"], "--data", str(world["root"] / f"in.{src}"),
                      "--out", str(out), "--engine", "ray", "--batch-size", "10", "--concurrency", "2", "-q"])
    assert rc == 0, err
    assert_same_as_local(read_back(out), world)
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]   # no temporary left


class FailOnce(Predictor):
    """Kills its own process on the batch holding the text 'KILL <marker>', the first time only (the marker file
    says it happened): Ray restarts the actor and retries the batch."""

    def __call__(self, batch):
        for text in batch["text"].to_pylist():
            if text.startswith("KILL "):
                marker = Path(text[5:])
                if not marker.exists():
                    marker.write_text(str(os.getpid()))
                    os._exit(1)
        return super().__call__(batch)


def test_a_killed_worker_loses_and_duplicates_no_row(ray_local, world, tmp_path):
    marker = tmp_path / "killed"
    texts = list(world["texts"])
    texts[57] = f"KILL {marker}"
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    out = tmp_path / "out.parquet"
    n = predict_ray(data, out, world["model"], batch_size=10, concurrency=2, quiet=True, predictor_cls=FailOnce,
                    ray_remote_args={"max_restarts": 2, "max_task_retries": 2})
    assert marker.exists()              # a worker did die
    rows = pq.read_table(out).to_pylist()
    assert n == N and sorted(r["row_id"] for r in rows) == list(range(N))
    assert [r["row_id"] for r in rows] == list(range(N))
    assert [r["text"] for r in rows] == texts


def test_the_predictor_pickles_without_its_model_and_takes_dicts_frames_and_tables(world):
    pd = pytest.importorskip("pandas")
    p = predictor(world["model"])
    texts = world["texts"][:7]
    got = p({"text": texts, "id": list(range(7))})
    assert p._clf is not None
    assert list(got["id"]) == list(range(7)) and list(got["text"]) == texts
    assert list(got["label"]) == [r["label"] for r in world["local"][:7]]
    for lab, col in (("ham", "proba_ham"), ("spam", "proba_spam")):
        assert max(abs(a - r["probabilities"][lab]) for a, r in zip(got[col], world["local"][:7])) <= 1e-6
    blob = pickle.dumps(p)
    assert len(blob) < 1000 and b"TfidfClassifier" not in blob
    q = pickle.loads(blob)
    assert q._clf is None and q.model_dir == p.model_dir
    frame = q(pd.DataFrame({"text": texts}))
    assert isinstance(frame, pd.DataFrame) and list(frame["label"]) == list(got["label"])
    table = q(pa.table({"text": texts}))
    assert isinstance(table, pa.Table) and table["label"].to_pylist() == list(got["label"])
    assert table["model"].to_pylist() == [world["local"][0]["model"]] * 7


def test_the_predictor_names_a_missing_text_column(world):
    with pytest.raises(ValueError, match="no column 'text'; the columns are: 'body'"):
        predictor(world["model"])({"body": ["hello"]})


@pytest.mark.parametrize("case, message", [
    ("unknown-suffix", "cannot tell the format from the suffix '.txt'"),
    ("no-text-column", "no column 'text'; the columns are: 'body', 'label'"),
    ("empty-text", "record 2: column 'text' is empty"),
    ("bad-out-suffix", "--out"),
    ("no-out", "--engine ray needs --data"),
    ("batch-size-local", "--batch-size applies to --engine ray only"),
])
def test_bad_input_is_one_line_exit_2(world, tmp_path, case, message):
    model, data, out = world["model"], tmp_path / "in.csv", tmp_path / "out.csv"
    data.write_text("text,label\nhello,x\n")
    extra = ["--engine", "ray"]
    if case == "unknown-suffix":
        data = tmp_path / "in.txt"
        data.write_text("text\nhello\n")
    elif case == "no-text-column":
        data.write_text("body,label\nhello,x\n")
    elif case == "empty-text":
        data.write_text('text,label\nhello,x\n"",y\n')
    elif case == "bad-out-suffix":
        out = tmp_path / "out.xlsx"
    elif case == "batch-size-local":
        extra = ["--batch-size", "8"]
    argv = ["predict", "--model-dir", model, "--data", str(data), *extra, "-q"]
    if case != "no-out":
        argv += ["--out", str(out)]
    rc, err = invoke(argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and message in lines[0], err
    assert not out.exists()


def test_without_ray_the_error_names_the_extra(world, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "ray.data", None)
    data = tmp_path / "in.csv"
    data.write_text("text\nhello\n")
    rc, err = invoke(["predict", "--model-dir", world["model"], "--data", str(data), "--out",
                      str(tmp_path / "o.csv"), "--engine", "ray", "-q"])
    assert rc == 2 and err.strip() == ("headswap predict: error: --engine ray needs Ray Data, which is not installed: "
                                       "pip install 'headswap[ray]'"), err


def test_a_transformer_model_gives_the_same_answers_on_ray(ray_local, tmp_path):
    """The TF-IDF model above is for speed; this is the path a real model takes (torch in each actor)."""
    from tiny_models import make_tiny_encoder

    from headswap import TextClassifier
    enc = make_tiny_encoder(tmp_path / "enc")
    clf = TextClassifier(strategy="encoder-mlp", model=str(enc), epochs=1, progress=False, eval_fraction=0)
    clf.fit(["win cash now", "free call now", "see you at noon", "ok home"] * 3, ["spam", "spam", "ham", "ham"] * 3)
    model = str(clf.save(tmp_path / "model"))
    texts = _texts(23)
    data = tmp_path / "in.csv"
    pacsv.write_csv(pa.table({"text": texts}), data)
    rc, err = invoke(["predict", "--model-dir", model, "--data", str(data), "--out", str(tmp_path / "local.jsonl"),
                      "-q"])
    assert rc == 0, err
    local = read_back(tmp_path / "local.jsonl")
    rc, err = invoke(["predict", "--model-dir", model, "--data", str(data), "--out", str(tmp_path / "ray.jsonl"),
                      "--engine", "ray", "--batch-size", "5", "-q"])
    assert rc == 0, err
    rows = read_back(tmp_path / "ray.jsonl")
    assert [r["row_id"] for r in rows] == list(range(23)) and [r["text"] for r in rows] == texts
    for r, want in zip(rows, local):
        assert r["label"] == want["label"]
        assert all(abs(r[f"proba_{lab}"] - p) <= 1e-6 for lab, p in want["probabilities"].items()), (r, want)


def test_more_actors_than_the_cluster_has_cpus_is_refused_not_a_hang(ray_local, world, tmp_path):
    rc, err = invoke(["predict", "--model-dir", world["model"], "--data", str(world["root"] / "in.csv"),
                      "--out", str(tmp_path / "o.csv"), "--engine", "ray", "--concurrency", "3", "-q"])
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "--concurrency 3 needs 3 CPUs, and the Ray cluster has 2" in lines[0], err
    assert not (tmp_path / "o.csv").exists()
