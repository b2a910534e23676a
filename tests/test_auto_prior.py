"""auto's --prior: a table built without a data set (leave-one-set-out) or none at all instead of the shipped one,
recorded in results.json and results.md; the rungs it drops or keeps follow the table; a file that is no table is
one line naming it, exit code 2, before the data or a model is read. With the tests' tiny encoder."""

from __future__ import annotations

import json

import pytest
from cli_run import invoke
from test_auto import world  # noqa: F401  (the tiny encoder, tiny causal LM and spam/ham data of auto's tests)
from test_prior import _script, run_file

import headswap.auto.main
from headswap.auto.estimator import AutoClassifier
from headswap.auto.prior import read_table
from headswap.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")

CELL = {"ran": 2, "within": 1, "won": 1}
BAD = {     # the file's text (None: no file), and what the one line says of it
    "missing": (None, "no such file"),
    "not JSON": ("{'families': {}}", "not JSON (Expecting property name"),
    "not UTF-8": (b"\xff\xfe{}", "not JSON (not UTF-8 text)"),
    "a list": ("[1, 2]", "a JSON list, not an object"),
    "no families": ('{"runs": [], "sets": {}}', "no 'families'"),
    "runs not a list": (json.dumps({"families": {}, "runs": 3, "sets": {}}), "'runs' is not a JSON array"),
    "a cell of no runs": (json.dumps({"runs": [], "sets": {}, "families": {"f": {"s": {"a": {**CELL, "ran": 0}}}}}),
                          "family 'f', shape 's', data set 'a': "),
    "a count not whole": (json.dumps({"runs": [], "sets": {}, "families": {"f": {"s": {"a": {**CELL, "won": 0.5}}}}}),
                          "is not whole counts of runs"),
}


def _bad_file(tmp_path, case: str):
    text, said = BAD[case]
    path = tmp_path / "prior.json"
    if text is not None:
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path, said


class Started(Exception):
    pass


def _started(*a, **kw):
    raise Started("the work started")


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_prior_that_is_no_table_is_one_line_naming_the_file_before_any_work(world, tmp_path, monkeypatch, case):
    _, enc, _, data = world
    path, said = _bad_file(tmp_path, case)
    monkeypatch.setattr(headswap.auto.main, "auto", _started)
    rc, _, err = invoke(["auto", "--data", str(data), "--budget", "1m", "--model", enc, "--out", str(tmp_path / "out"),
                         "--prior", str(path), "-q"])
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"headswap auto: error: --prior {path}: ") and said in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_a_folder_is_no_table_and_auto_and_autoclassifier_refuse_it_before_the_data_or_a_model(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=f"^--prior {tmp_path}: a folder, not a table"):
        read_table(tmp_path)
    path, said = _bad_file(tmp_path, "a list")
    monkeypatch.setattr(headswap.auto.main, "_models", _started)
    with pytest.raises(ConfigError, match=f"^prior {path}: not a prior table .*{said}"):
        auto_out = tmp_path / "auto-out"
        headswap.auto.main.auto(tmp_path / "no-such-data", 60, out=auto_out, progress=False, prior=path)
    assert not auto_out.exists()
    with pytest.raises(ConfigError, match=f"^prior {tmp_path / 'nope.json'}: no such file"):
        AutoClassifier(budget="1m", prior=tmp_path / "nope.json", out=tmp_path / "clf", progress=False).fit(
            ["win cash now", "see you at lunch"] * 5, ["spam", "ham"] * 5)
    assert not (tmp_path / "clf").exists()
    assert AutoClassifier(prior="none").get_params()["prior"] == "none"


@pytest.fixture(scope="module")
def tables(tmp_path_factory, world):
    """Two data sets of the tests' data's size and classes on which an encoder's frozen heads never came within a
    point of the winner: the table of both drops the family; built without beta, alpha alone is a hint, which drops
    nothing."""
    root = tmp_path_factory.mktemp("priors")
    with pytest.MonkeyPatch.context() as mp:
        build_prior = _script("build_prior", mp)
        for name in ("alpha", "beta"):
            run_file(root / "runs" / f"{name}.json", f"/d/{name}", 100, 2, {"frozen": 0.5, "full": 0.9}, label=name)
        build_prior.main(root / "runs", out=root / "both.json")
        build_prior.main(root / "runs", ["beta"], root / "without-beta.json")
    return root


def _auto(world, out, prior) -> dict:
    _, enc, _, data = world
    rc, _, err = invoke(["auto", "--data", str(data), "--budget", "10m", "--model", enc, "--strategies", "encoder-mlp",
                         "--regime", "head-only", "--no-lr-search", "--no-more-epochs", "--no-blend", "--out", str(out),
                         "--prior", str(prior), "-q"])
    assert rc == 0, err
    return json.loads((out / "results.json").read_text())


def _frozen(results) -> list[tuple[str, str]]:
    return [(c["status"], c.get("reason") or "") for c in results["auto"]["candidates"] if c["tier"] == "frozen"]


def test_a_table_built_without_a_set_is_the_one_the_run_asks_and_records(world, tables, tmp_path):
    both = _auto(world, tmp_path / "both", tables / "both.json")
    assert len(_frozen(both)) == 3 and all(
        status == "skipped" and "prior: on none of the 2 data sets" in why and "(alpha, beta)" in why
        for status, why in _frozen(both)), _frozen(both)
    path = tables / "without-beta.json"
    loso = _auto(world, tmp_path / "loso", path)
    assert [status for status, _ in _frozen(loso)] == ["ran"] * 3, _frozen(loso)     # one set: a hint, no drop
    prior = loso["auto"]["prior"]
    assert loso["meta"]["args"]["prior"] == prior["table"] == str(path)
    assert prior["data_sets"] == ["alpha"] and prior["without"] == ["beta"] and prior["runs"] == 1
    assert both["auto"]["prior"]["data_sets"] == ["alpha", "beta"] and both["auto"]["prior"]["without"] == []
    md = (tmp_path / "loso" / "results.md").read_text()
    assert f"Prior: `{path}`, 1 run on alpha, built without beta; this data's shape: under 300 texts · 2 " in md


def test_no_prior_is_the_ladder_s_own_order_and_the_shipped_one_is_named(world, tmp_path):
    none = _auto(world, tmp_path / "none", "none")
    assert [status for status, _ in _frozen(none)] == ["ran"] * 3
    assert {k: none["auto"]["prior"][k] for k in ("table", "data_sets", "without", "runs")} == {
        "table": "none", "data_sets": [], "without": [], "runs": 0}
    assert "Prior: none (the ladder's own order" in (tmp_path / "none" / "results.md").read_text()
    shipped = read_table("shipped")
    assert read_table(None) == shipped and sorted(shipped["sets"]) == ["clinc150", "emotion", "germeval2018", "hwu64",
                                                                         "sms_spam"]
