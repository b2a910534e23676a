"""The user guide stays true: every example in README.md and docs/ runs (tests/docs_runner.py says how), the site
builds with `mkdocs build --strict`, the CLI reference is the generated one, and the guide covers every command and
strategy."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from docs_runner import NOT_RUN, RUN, blocks, check_parses, readme_quickstart, run_page, skip_reason, write_data
from headswap.cli.parser import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SHARED_DATA = ROOT.parent / "shared" / "data"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
README_MAX_LINES = 90
BENCHMARKS_MAX_LINES = 500


def _runnable(page: Path) -> list:
    return [b for b in blocks(page.read_text(encoding="utf-8")) if b.lang in RUN and skip_reason(b) is None]


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if _runnable(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples_run(page, tmp_path):
    if not SHARED_DATA.is_dir():
        pytest.skip(f"the pages' data slices come from {SHARED_DATA}, which is not here")
    write_data(SHARED_DATA, tmp_path)
    run_page(page, tmp_path)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_blocks_are_runnable_or_say_why_not(page):
    for b in blocks(page.read_text(encoding="utf-8")):
        assert b.lang not in NOT_RUN, f"{page.name}:{b.line}: ```{b.lang} is not run by the tests: use bash or python"
        reason = skip_reason(b)
        assert reason != "", f"{page.name}:{b.line}: a skipped block says why (<!-- docs-test: skip REASON -->)"
        if b.mark is not None:
            assert reason is not None, f"{page.name}:{b.line}: unknown docs-test mark {b.mark!r}"
        if reason and b.lang == "bash":
            check_parses(b, f"{page.name}:{b.line}")


def test_mkdocs_build_strict(tmp_path):
    """A broken link, a missing page or an API name mkdocstrings cannot find fails the build."""
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                        "-d", str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})   # material's notice, not a problem
    assert r.returncode == 0, r.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()


def _nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for v in nav.values() for p in _nav_pages(v)]
    return [p for item in nav for p in _nav_pages(item)]


def test_every_page_is_in_the_nav():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)   # BaseLoader: !!python tags
    listed = set(_nav_pages(config["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages - listed == set(), "pages missing from mkdocs.yml's nav"
    assert listed - pages == set(), "nav entries without a page"


def test_cli_reference_is_generated():
    from headswap.cli.reference import render
    assert (DOCS / "cli.md").read_text(encoding="utf-8") == render(), \
        "docs/cli.md is out of date: python -m headswap.cli.reference > docs/cli.md"


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; the guide (docs/) holds the rest"
    fence = lines.index("```bash")
    assert fence <= 4 and lines[fence + 1].startswith("make demo") and lines[fence + 2].startswith("make test"), \
        "README's first lines are the two set-up commands"


def test_benchmarks_is_a_readers_page():
    """BENCHMARKS.md gives the current figures, the best per data set first; dated runs and their history go to
    docs/benchmark-log.md (it had grown to 754 lines as runs were added)."""
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= BENCHMARKS_MAX_LINES, \
        f"BENCHMARKS.md has {len(lines)} lines; move dated runs to docs/benchmark-log.md"
    assert next(line for line in lines if line.startswith("## ")) == "## Best result per data set"
    assert re.findall(r"(?i)\bissues?[ #/-]*\d+", text) == [], "issue numbers: say what was measured instead"


def test_the_readmes_quickstart_is_run_by_the_quickstart_page():
    """README's quickstart blocks are skipped because docs/quickstart.md runs the same lines: every line of them
    must be there (else README could show a command no test runs)."""
    page = (DOCS / "quickstart.md").read_text(encoding="utf-8").splitlines()
    shown = readme_quickstart((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(shown) == 2
    missing = [line for b in shown for line in b.code.splitlines() if line.strip() and line not in page]
    assert missing == [], f"README quickstart lines docs/quickstart.md does not run: {missing}"


def test_the_guide_runs_every_command():
    ran = {m for p in DOCS.rglob("*.md") for b in _runnable(p) if b.lang == "bash"
           for m in re.findall(r"\bheadswap\s+([a-z]+)", b.code)}
    assert set(COMMANDS) - ran == set(), "commands no runnable docs example uses"


def test_the_guide_covers_every_strategy():
    from headswap.settings import STRATEGIES
    text = (DOCS / "strategies.md").read_text(encoding="utf-8")
    assert [s for s in STRATEGIES if f"`{s}`" not in text] == []


def test_readme_links_lead_somewhere():
    """README is read on the forge, outside the site: its relative links must name files that exist."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)]+)\)", text) if "://" not in t]
    assert targets and [t for t in targets if not (ROOT / t).exists()] == []
