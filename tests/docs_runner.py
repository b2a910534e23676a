"""Runs a Markdown page's examples the way a reader would: every ```bash and ```python block, top to bottom, in one
working folder per page, and checks the output a page shows.

The rules a page is written to (docs/index.md, "How the examples are tested", says them to readers):
- ```bash blocks run with `bash -euo pipefail`, the `headswap` command on PATH; ```python blocks run in one
  namespace per page, so a later block sees an earlier one's names. Both run in the page's folder, which holds
  the data slices written by `write_data` (spam/, emotion/, goemotions/, clinc/, germeval/).
- A ```text block right after a runnable block (nothing but blank lines between) is that block's output: it is
  compared with what the block printed to stdout, line by line, `...` standing for any text (doctest's ELLIPSIS)
  and any number for any number (timings and scores vary with the machine), whitespace runs equal.
- `<!-- docs-test: skip REASON -->` on the line before a fence keeps that block from running; the reason is
  required, and the block's `headswap` commands must still parse (check_parses). Other languages (```csv, ```json, ```yaml ...) are shown, not run.
"""

from __future__ import annotations

import contextlib
import csv
import doctest
import io
import os
import random
import re
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

RUN = ("bash", "python")
# Spellings of runnable languages that the runner would not run: a page may not use them, so nothing escapes.
NOT_RUN = ("sh", "shell", "console", "py", "python3", "pycon", "zsh")
FENCE = re.compile(r"^(\s*)```([\w+-]*)\s*(.*)$")
MARK = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
NUMBER = re.compile(r"[-+]?\d+(?:,\d{3})*(\.\d+)?([eE][-+]?\d+)?")   # 1,234 is one number; "14," is 14 and a comma
BLOCK_TIMEOUT = 600


@dataclass
class Block:
    lang: str
    code: str
    line: int               # 1-based line of the opening fence
    mark: str | None        # the docs-test comment above the fence, if any
    output: "Block | None" = None


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a page, each runnable one with the ```text block that shows its output."""
    lines, found, i = text.splitlines(), [], 0
    last_end = 0          # the line after the previous block's closing fence
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2).lower(), i
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.match(prev)
        close = re.compile(rf"^{re.escape(indent)}```\s*$")
        i += 1
        while i < len(lines) and not close.match(lines[i]):
            i += 1
        if i == len(lines):
            raise ValueError(f"line {start + 1}: a ``` fence is never closed")
        block = Block(lang, textwrap.dedent("\n".join(lines[start + 1:i])) + "\n", start + 1,
                      mark.group(1) if mark else None)
        last = found[-1] if found else None
        if (lang == "text" and last is not None and last.lang in RUN and last.output is None
                and not any(ln.strip() for ln in lines[last_end:start])):
            last.output = block
        else:
            found.append(block)
        i += 1
        last_end = i
    return found


def skip_reason(block: Block) -> str | None:
    """The reason a block is not run, '' when it is marked skip without one; None when it runs."""
    if block.mark is None or not block.mark.startswith("skip"):
        return None
    return block.mark[len("skip"):].strip(" :")


def headswap_commands(code: str) -> list[list[str]]:
    """The `headswap ...` command lines of a bash block (backslash continuations joined, comments cut), split as
    the shell would."""
    import shlex
    joined = re.sub(r"\\\n", " ", code)
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["headswap"]:
            out.append(words[1:])
    return out


def check_parses(block: Block, where: str) -> None:
    """A skipped block's headswap commands still parse: a renamed or removed flag fails here, not for a reader."""
    from headswap.cli.parser import build_parser
    for argv in headswap_commands(block.code):
        try:
            build_parser().parse_args(argv)
        except SystemExit as e:
            raise AssertionError(f"{where}: a skipped command no longer parses: headswap {' '.join(argv)}") from e


def same_output(expected: str, got: str) -> bool:
    """Expected (as the page shows it) against actual stdout: numbers masked, ELLIPSIS, whitespace runs equal."""
    def mask(s: str) -> str:
        return "\n".join(NUMBER.sub("0", ln.rstrip()) for ln in s.strip("\n").splitlines()) + "\n"
    checker = doctest.OutputChecker()
    return checker.check_output(mask(expected), mask(got), doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)


def readme_quickstart(text: str) -> list[Block]:
    """README's quickstart blocks: skipped there because docs/quickstart.md runs the same lines (tests/test_docs.py
    checks that it holds them); .ci/wheel-check runs them as they stand, from a pip install."""
    return [b for b in blocks(text) if b.lang in RUN and "docs/quickstart.md runs" in (skip_reason(b) or "")]


def run_page(page: Path, workdir: Path, log=print) -> list[tuple[int, float]]:
    """Runs every runnable, unskipped block of `page` in `workdir`; raises AssertionError naming the page and line
    of the first block that fails or prints other output than the page shows. Returns (line, seconds) per block."""
    runnable = [b for b in blocks(page.read_text(encoding="utf-8")) if b.lang in RUN and skip_reason(b) is None]
    return run_blocks(page.name, runnable, workdir, log)


def run_blocks(name: str, found: list[Block], workdir: Path, log=print) -> list[tuple[int, float]]:
    """run_page on the given blocks of page `name`, skipped or not."""
    namespace: dict = {"__name__": "__main__"}
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    times = []
    for block in found:
        where = f"{name}:{block.line}"
        t0 = time.perf_counter()
        if block.lang == "bash":
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], cwd=workdir, env=env, text=True,
                               capture_output=True, timeout=BLOCK_TIMEOUT)
            if r.returncode != 0:
                raise AssertionError(f"{where}: the bash block exited {r.returncode}\n{block.code}\n"
                                     f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}")
            out = r.stdout
        else:
            buf, here = io.StringIO(), os.getcwd()
            try:
                os.chdir(workdir)
                with contextlib.redirect_stdout(buf):
                    exec(compile(block.code, where, "exec"), namespace)
            except Exception as e:
                raise AssertionError(f"{where}: the python block raised {type(e).__name__}: {e}\n{block.code}") from e
            finally:
                os.chdir(here)
            out = buf.getvalue()
        seconds = time.perf_counter() - t0
        times.append((block.line, seconds))
        log(f"{where}: {block.lang} block ran in {seconds:.1f} s")
        if block.output is not None and not same_output(block.output.code, out):
            raise AssertionError(f"{where}: the output differs from what the page shows at line "
                                 f"{block.output.line}\n--- page:\n{block.output.code}--- got:\n{out}")
    return times


# The data slices a page's folder holds: (folder, source folder in ../shared/data, {file: texts per label}).
SLICES = [
    ("spam", "sms_spam", {"train.csv": {"ham": 260, "spam": 60}, "test.csv": {"ham": 80, "spam": 20}}),
    ("emotion", "emotion", {"train.csv": 60, "validation.csv": 20, "test.csv": 20}),
    ("goemotions", "go_emotions", {"train.csv": 300, "validation.csv": 100, "test.csv": 100}),
    ("clinc", "clinc150", {"train.csv": 12, "validation.csv": 6}),
    ("germeval", "germeval2018", {"train.csv": {"OFFENSE": 60, "OTHER": 80},
                                  "validation.csv": {"OFFENSE": 20, "OTHER": 30}}),
]
CLINC_INTENTS = 10   # the first intents by name, plus `oos`


def write_data(shared: Path, workdir: Path) -> None:
    """Small seeded, stratified slices of ../shared/data, the same on every run (texts kept exactly)."""
    for folder, source, files in SLICES:
        (workdir / folder).mkdir(parents=True, exist_ok=True)
        for name, per_label in files.items():
            with open(shared / source / name, newline="", encoding="utf-8") as f:
                reader = csv.reader(f)
                header, rows = next(reader), list(reader)
            if folder == "goemotions":   # multi-label: a seeded sample of rows, not per label
                chosen = random.Random(0).sample(rows, min(per_label, len(rows)))
            else:
                by = defaultdict(list)
                for row in rows:
                    by[row[1]].append(row)
                labels = sorted(by)
                if folder == "clinc":
                    labels = sorted(lab for lab in labels if lab != "oos")[:CLINC_INTENTS] + ["oos"]
                chosen = []
                for lab in labels:
                    n = per_label[lab] if isinstance(per_label, dict) else per_label
                    chosen += random.Random(f"{folder}/{name}/{lab}").sample(by[lab], min(n, len(by[lab])))
                random.Random(0).shuffle(chosen)
            with open(workdir / folder / name, "w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f, lineterminator="\n")
                writer.writerow(header)
                writer.writerows(chosen)
