"""Data as users hold it, for auto and bench: one labelled file (validation, and test with --test-fraction, held out of
it, stratified and seeded), a folder with train.csv alone (no test score, and the report says so), other column names
(--text-column, --label-column), and one-line refusals of what cannot work."""

from __future__ import annotations

import json

import pytest
import torch
from cli_run import invoke
from test_bench import HAM, SPAM, _write_split
from tiny_models import make_tiny_encoder

from headswap.auto.main import auto
from headswap.trials.plan import load_bench_data
from headswap.bench.run import run_bench
from headswap.errors import ConfigError, DataError

pytestmark = pytest.mark.usefixtures("one_thread")
QUICK = {"strategies": "encoder-mlp", "progress": False, "lr_search": False, "more_epochs": False}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("auto-data")
    torch.manual_seed(0)
    enc = make_tiny_encoder(root / "tiny-enc")
    _write_split(root / "tickets.csv", 100)
    only_train = root / "only-train"
    only_train.mkdir()
    _write_split(only_train / "train.csv", 60)
    full = root / "full"
    full.mkdir()
    _write_split(full / "train.csv", 45)
    _write_split(full / "test.csv", 21, offset=100)
    return root, str(enc)


def _rows(n: int, offset: int = 0) -> list[tuple[str, str]]:
    """_write_split's texts and labels: a third spam."""
    return ([(f"{SPAM[i % len(SPAM)]} {offset + i}", "spam") for i in range(n // 3)]
            + [(f"{HAM[i % len(HAM)]} {offset + i}", "ham") for i in range(n - n // 3)])


def test_auto_on_one_csv_file_scores_no_test_and_says_so(world):
    root, enc = world
    data, out, logs = root / "tickets.csv", root / "one-file", []
    results = auto(data, 60, models=[enc], out=out, log=logs.append, **QUICK)
    sizes = results["meta"]["data"]
    assert results["rows"] == []          # neither the winner nor the baseline scored on test
    assert sizes["train"]["used"] == 90 and sizes["validation"]["used"] == 10 and sizes["test"]["used"] == 0
    assert sizes["validation"]["source"] == f"10% of {data} held out, stratified, seed 0"
    assert sizes["train"]["source"] == f"{data} less the validation split"
    assert sizes["test"]["source"] == f"none ({data} is one file, and no test fraction was asked for)"
    assert "no test set: the winner and the baseline are not scored on test" in logs
    assert logs[0].startswith("headswap auto: 90 train, 10 validation texts and no test set;")
    md = (out / "results.md").read_text()
    assert f"- validation: 10% of {data} held out, stratified, seed 0 (10 texts)" in md
    assert "No test set: nothing was scored on test" in md and "| macro F1 |" not in md
    html = (out / "report.html").read_text()
    assert 'id="results"' not in html and 'id="confusion"' not in html and 'id="auto"' in html
    assert f"<dt>test</dt><dd>none ({data} is one file" in html
    assert json.loads((out / "results.json").read_text())["meta"]["data"] == sizes


def test_auto_with_a_test_fraction_scores_a_seeded_held_out_test_set(world):
    root, enc = world
    data, out = root / "tickets.csv", root / "fraction"
    results = auto(data, 60, models=[enc], out=out, log=lambda _: None, test_fraction=0.25, **QUICK)
    sizes = results["meta"]["data"]
    assert sizes["test"]["used"] == 25 and sizes["test"]["classes"] == {"ham": 17, "spam": 8}
    assert sizes["train"]["used"] + sizes["validation"]["used"] + sizes["test"]["used"] == 100
    assert sizes["test"]["source"] == f"25% of {data} held out, stratified, seed 0"
    assert sizes["validation"]["source"] == f"10% of the rest of {data} held out, stratified, seed 0"
    assert sizes["train"]["source"] == f"{data} less the test and validation splits"
    assert results["rows"] and all(r["n_test"] == 25 for r in results["rows"])
    assert "## Test set (scored once" in (out / "results.md").read_text()
    assert 'id="results"' in (out / "report.html").read_text()
    # the same seed holds out the same texts, which are not trained on; another seed holds out others
    first, again = (load_bench_data(data, test_fraction=0.25, seed=0) for _ in range(2))
    assert first.test.texts == again.test.texts and first.train.texts == again.train.texts
    assert not set(first.test.texts) & set(first.train.texts)
    assert load_bench_data(data, test_fraction=0.25, seed=1).test.texts != first.test.texts


def test_auto_on_a_folder_with_only_train_csv_runs_without_a_test_score(world):
    root, enc = world
    out = root / "only-train-out"
    rc, _, err = invoke(["auto", "--data", str(root / "only-train"), "--budget", "60s", "--model", enc,
                      "--strategies", "encoder-mlp", "--no-lr-search", "--no-more-epochs", "--out", str(out), "-q"])
    assert rc == 0, err
    results = json.loads((out / "results.json").read_text())
    assert results["rows"] == [] and results["meta"]["data"]["test"]["source"] == \
        f"none ({root / 'only-train'} holds no test.csv, and no test fraction was asked for)"
    assert "No test set" in (out / "results.md").read_text() and (out / "model").is_dir()


def test_bench_on_one_file_holds_its_test_set_out(world):
    root, enc = world
    data, out = root / "tickets.csv", root / "bench-one-file"
    results = run_bench(data, models=[enc], strategies="encoder-mlp", out=out, test_fraction=0.2, progress=False,
                        zero_shot=False, estimate=False, log=lambda _: None)
    sizes = results["meta"]["data"]
    assert sizes["train"]["used"] == 80 and sizes["test"]["used"] == 20
    assert sizes["test"]["source"] == f"20% of {data} held out, stratified, seed 0"
    assert [r["status"] for r in results["rows"]] == ["ok", "ok"] and all(r["n_test"] == 20 for r in results["rows"])
    assert f"- test: 20% of {data} held out, stratified, seed 0 (20 texts)" in (out / "results.md").read_text()


def test_other_column_names_apply_to_every_split_file(world, tmp_path):
    root, enc = world
    jsonl = tmp_path / "tickets.jsonl"
    jsonl.write_text("".join(json.dumps({"body": t, "category": c}) + "\n" for t, c in _rows(80)))
    rc, _, err = invoke(["auto", "--data", str(jsonl), "--text-column", "body", "--label-column", "category",
                      "--test-fraction", "0.25", "--budget", "60s", "--model", enc, "--strategies", "encoder-mlp",
                      "--no-lr-search", "--no-more-epochs", "--out", str(tmp_path / "auto"), "-q"])
    assert rc == 0, err
    results = json.loads((tmp_path / "auto" / "results.json").read_text())
    assert results["meta"]["data"]["test"]["used"] == 20 and results["rows"][0]["n_test"] == 20
    folder = tmp_path / "named"
    folder.mkdir()
    for name, n, offset in (("train.csv", 45, 0), ("test.csv", 21, 100)):
        (folder / name).write_text("body,category\n" + "".join(f"{t},{c}\n" for t, c in _rows(n, offset)))
    results = run_bench(folder, models=[enc], strategies="encoder-mlp", out=tmp_path / "bench", text_column="body",
                        label_column="category", progress=False, zero_shot=False, estimate=False, log=lambda _: None)
    assert all(r["status"] == "ok" and r["n_test"] == 21 for r in results["rows"])
    with pytest.raises(DataError, match="no column 'text'"):      # the default columns are not there
        run_bench(folder, models=[enc], strategies="encoder-mlp", out=tmp_path / "bench2", log=lambda _: None)


@pytest.mark.parametrize("command", ["auto", "bench"])
@pytest.mark.parametrize("data, extra, says", [
    ("tickets.csv", ["--test-fraction", "0"], "argument --test-fraction: expected a share between 0 and 1"),
    ("tickets.csv", ["--test-fraction", "1.5"], "argument --test-fraction: expected a share between 0 and 1"),
    ("full", ["--test-fraction", "0.2"], "--test-fraction 0.2 holds a test split out of the training texts, but "),
    ("nope.csv", [], "--data {root}/nope.csv does not exist: give a labelled CSV, TSV, JSONL or Parquet file"),
    ("tickets.csv", ["--test-fraction", "0.2", "--text-column", "body"], "tickets.csv: no column 'body'"),
])
def test_what_cannot_work_is_refused_in_one_line(world, command, data, extra, says):
    root, enc = world
    out = root / f"refused-{command}"
    budget = ["--budget", "60s"] if command == "auto" else []
    rc, _, err = invoke([command, "--data", str(root / data), *budget, "--model", enc, "--strategies", "encoder-mlp",
                      "--out", str(out), "-q", *extra])
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert says.format(root=root) in lines[0], lines[0]
    assert not out.exists()


def test_bench_needs_a_test_split_and_python_calls_are_refused_alike(world):
    root, enc = world
    for data, says in ((root / "tickets.csv", "is one file, and headswap bench scores every row on a test set: "
                                              "add --test-fraction"),
                       (root / "only-train", "test.csv is missing: headswap bench scores every row on a test set")):
        rc, _, err = invoke(["bench", "--data", str(data), "--model", enc, "--out", str(root / "no-test"), "-q"])
        assert rc == 2 and len(err.strip().splitlines()) == 1 and says in err, err
    with pytest.raises(DataError, match="is one file, and run_bench scores every row on a test set: add test_fraction"):
        run_bench(root / "tickets.csv", models=[enc], out=root / "no-test")
    with pytest.raises(ConfigError, match="test_fraction must be a share of the texts between 0 and 1"):
        auto(root / "tickets.csv", 60, models=[enc], out=root / "no-test", test_fraction=1.5)
    with pytest.raises(ConfigError, match="is a test split already: leave out test_fraction"):
        auto(root / "full", 60, models=[enc], out=root / "no-test", test_fraction=0.2)
    assert not (root / "no-test").exists()


def test_a_parquet_file_is_data_as_a_csv_is(world, tmp_path):
    """--data takes a Parquet file (pyarrow) wherever it takes a CSV: the same texts, labels and row numbers, and the
    same one-line error for a missing column."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    from headswap.data.load import load_dataset, load_texts
    from headswap.data.stream import iter_texts

    rows = _rows(30)
    frame = pd.DataFrame({"text": [t for t, _ in rows], "label": [y for _, y in rows]})
    frame.to_csv(tmp_path / "d.csv", index=False)
    frame.to_parquet(tmp_path / "d.parquet")
    frame.rename(columns={"text": "body"}).to_parquet(tmp_path / "other.parquet")
    csv, parquet = load_dataset(tmp_path / "d.csv"), load_dataset(tmp_path / "d.parquet")
    assert parquet.texts == csv.texts and parquet.labels == csv.labels and parquet.where(2) == f"{tmp_path / 'd.parquet'}, row 3"
    assert load_texts(tmp_path / "d.parquet").labels == [] and [t for _, t in iter_texts(tmp_path / "d.parquet")] == csv.texts
    with pytest.raises(DataError, match=r"other.parquet: no column 'text'; the columns are: 'body', 'label'"):
        load_dataset(tmp_path / "other.parquet")
    rc, _, err = invoke(["auto", "--data", str(tmp_path / "other.parquet"), "--budget", "30s", "--model", world[1],
                         "--out", str(tmp_path / "out"), "-q"])
    assert rc == 2 and "no column 'text'" in err.strip() and len(err.strip().splitlines()) == 1, err


def test_a_tiny_test_fraction_is_said_of_the_test_split_in_a_share_one_can_read(world, caplog):
    """--test-fraction 0.001 once warned of "holding out 0% for validation": the wrong split, and a share that
    reads as none."""
    root, _ = world
    with caplog.at_level("WARNING"):
        data = load_bench_data(root / "tickets.csv", test_fraction=0.001, seed=0)
    assert len(data.test) == 2
    said = [r.getMessage() for r in caplog.records if "holding out" in r.getMessage()]
    assert len(said) == 1 and "holding out 0.1% for test with every class on both sides takes 2 of 100" in said[0]
    assert "validation" not in said[0]
