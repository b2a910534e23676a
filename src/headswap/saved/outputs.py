"""Where a command may write: one rule for every command and method that writes, so that none replaces a file that
is not its own. A path is written only if
- it is no input of the command (compared as files: another spelling of the path, or a hard link, is the same file);
- it lies in no saved model's folder (one holding headswap_config.json), unless the command saves that model;
- where a file is there already, headswap wrote it: a folder of outputs lists what headswap wrote there, with each
  file's hash, in MANIFEST (a file changed since, say a to_label.csv being labelled, is the user's now), and a single
  output file (explain --html, demo --json) holds its MARK near its start.
A refusal is one HeadswapError naming the flag, the path, why, and what to give instead."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from headswap.errors import HeadswapError
from headswap.saved.atomic import sha256_of, write_text, written_together
from headswap.saved.model_dir import CONFIG_FILE

MANIFEST = ".headswap-outputs.json"     # in a folder of outputs: {"files": {name: sha256 of what headswap wrote}}
GENERATOR = "headswap"
HTML_MARK = f'<meta name="generator" content="{GENERATOR}">'
JSON_MARK = f'"generator": "{GENERATOR}"'      # the first key of a JSON file written with indent
MARK_WITHIN = 4096      # bytes of a file searched for its mark

Inputs = Sequence[tuple[str, "str | Path | None"]]     # (flag, path) of each file the command reads


def model_folder(path) -> Path | None:
    """The saved model's folder that `path` is or lies in, or None."""
    here = Path(path).resolve()
    return next((folder for folder in (here, *here.parents) if (folder / CONFIG_FILE).is_file()), None)


def check_file(flag: str, path, *, inputs: Inputs = (), mark: str | None = None) -> None:
    """PATH may be written as a file. mark: what a file the command writes there holds near its start, so an
    existing file without it is refused; None leaves an existing file to the command (predict --out continues one
    with --resume)."""
    if not path:
        return
    p = Path(path)
    if p.is_dir():
        raise HeadswapError(f"{flag} {path} is a directory; give a file name")
    if not p.parent.is_dir():
        raise HeadswapError(f"{flag} {path}: the folder {p.parent} "
                            f"{'is not a folder' if p.parent.exists() else 'does not exist'}")
    for in_flag, source in inputs:
        if source is not None and _same_file(p, source):
            raise HeadswapError(f"{flag} {path} is the input file {in_flag} {source}; writing it would replace the "
                                f"input: give another file")
    _refuse_in_model(flag, p, model_folder(p))
    if mark is not None and (p.exists() or p.is_symlink()) and not _marked(p, mark):
        raise HeadswapError(f"{flag} {path} is a file that headswap did not write; writing would replace it: give "
                            f"a new file name, or remove it first")


def check_folder(flag: str, out, names: Iterable[str], *, inputs: Inputs = (),
                 ours: Callable[[Path, str], bool] | None = None) -> None:
    """OUT may take the files `names`: it is no file, no saved model and in none, and each OUT/name that exists is
    one headswap wrote (ours(OUT, name), by default: OUT's manifest lists it as it is) and no input."""
    if not out:
        return
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise HeadswapError(f"{flag} {out} is an existing file; give a directory")
    _refuse_in_model(flag, out, model_folder(out))
    names = list(names)
    for name in names:
        for in_flag, source in inputs:
            if source is not None and _same_file(out / name, source):
                raise HeadswapError(f"{flag} {out}: writing {name} there would replace the input file {in_flag} "
                                    f"{source}; give another folder")
    ours = ours or wrote
    theirs = [n for n in names if ((out / n).exists() or (out / n).is_symlink()) and not ours(out, n)]
    if theirs:
        them = "it" if len(theirs) == 1 else "them"
        raise HeadswapError(f"{flag} {out} holds {', '.join(theirs)}, which headswap did not write (or which changed "
                            f"since it did); writing would replace {them}: give a new or empty folder, or move "
                            f"{them} away")


def check_model_out(flag: str, out, *, inputs: Inputs = ()) -> None:
    """OUT may take a saved model: it is new, empty, a saved model (replaced whole by the save) or holds only a
    run's checkpoints (train --resume); it lies in no other model's folder and is no model the command reads."""
    if not out:
        return
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise HeadswapError(f"{flag} {out} is an existing file; give a directory")
    for in_flag, source in inputs:
        if source is not None and _same_file(p, source):
            raise HeadswapError(f"{flag} {out} is the model {in_flag} {source}; saving would replace it: give a new "
                                f"{flag}")
    _refuse_in_model(flag, p, model_folder(p.resolve().parent))     # OUT itself may be the model it replaces
    check_save(p, flag)


def check_save(path, flag: str = "save path") -> None:
    """A model may be saved into PATH: it is new, empty, a saved model or holds only a run's checkpoints, never a
    folder of other files (a project folder's README.md would become the model card). Every save() asks, from
    Python too; a blend's members are saved inside its folder, so where PATH lies is the commands' check."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise HeadswapError(f"{flag} {path} is an existing file; give a directory")
    if p.is_dir() and not (p / CONFIG_FILE).is_file():
        others = sorted(e.name for e in p.iterdir() if e.name != "checkpoints")
        if others:
            raise HeadswapError(f"{flag} {path} is a directory that holds no saved model (it has "
                                f"{', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); saving would replace "
                                "it: give a new or empty directory, or a saved model to replace")


# What a bench or auto run writes into OUT (bench's confusion-*.png besides): a folder holding one of these that no
# run wrote is the user's, and is refused rather than overwritten.
RUN_FILES = ("results.json", "results.md", "report.html", "learning_curves.png", "quality_vs_speed.png", "arms.png",
             "model", ".arms")


def check_run_folder(out, flag: str = "--out") -> None:
    """Refuse an OUT whose files a run would replace, unless an earlier run wrote it (its results.json is a run's):
    a user's own results.md or report.html is never overwritten. Other files are left beside the run's. OUT is no
    file, and no saved model nor in one (headswap.saved.outputs)."""
    out = Path(out)
    check_folder(flag, out, ())
    if not out.is_dir() or _is_run(out / "results.json"):
        return
    clash = sorted(p.name for p in out.iterdir()
                   if p.name in RUN_FILES or (p.name.startswith("confusion-") and p.suffix == ".png"))
    if clash:
        raise HeadswapError(f"{flag} {out} holds {', '.join(clash)}, which no headswap run wrote (there is no "
                            f"results.json of one), and the run would replace {'it' if len(clash) == 1 else 'them'}: "
                            f"give a new or empty folder")


def _is_run(path: Path) -> bool:
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(results, dict) and isinstance(results.get("meta"), dict) \
        and "headswap_version" in results["meta"]


def wrote(out: Path, name: str) -> bool:
    """Whether OUT/name is a file headswap wrote and nobody changed since (OUT's manifest has its hash)."""
    path = Path(out) / name
    digest = _manifest(Path(out)).get(name)
    return digest is not None and path.is_file() and not path.is_symlink() and sha256_of(path) == digest


@contextmanager
def writing(out, names: Sequence[str]) -> Iterator[list[Path]]:
    """written_together for OUT/name... (all of them or, a failure, none), then recorded as headswap's in OUT's
    manifest, so that a rerun into OUT may replace them."""
    out = Path(out)
    with written_together([out / n for n in names]) as tmp:
        yield tmp
    record(out, names)


def record(out, names: Iterable[str]) -> None:
    """Note in OUT's manifest that headswap wrote each OUT/name, as it is now."""
    out = Path(out)
    files = {**_manifest(out), **{n: sha256_of(out / n) for n in names}}
    try:
        write_text(out / MANIFEST, json.dumps({"written_by": GENERATOR, "files": files}, indent=1, sort_keys=True)
                   + "\n")
    except OSError as e:
        raise HeadswapError(f"wrote {', '.join(names)} in {out}, but noting them in {MANIFEST} failed "
                            f"({e.strerror or e}): a rerun into {out} will take them for files of yours") from None


def _manifest(out: Path) -> dict:
    try:
        files = json.loads((out / MANIFEST).read_text(encoding="utf-8")).get("files")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return {}
    return {k: v for k, v in files.items() if isinstance(v, str)} if isinstance(files, dict) else {}


def _marked(path: Path, mark: str) -> bool:
    if path.is_symlink() or not path.is_file():     # a FIFO or a device is never read (it could block)
        return False
    try:
        with open(path, "rb") as f:
            return mark.encode() in f.read(MARK_WITHIN)
    except OSError:
        return False


def _same_file(path: Path, source) -> bool:
    try:
        return os.path.samefile(path, source)
    except OSError:     # either is missing (nothing to replace) or unreadable
        return False


def _refuse_in_model(flag: str, path: Path, folder: Path | None) -> None:
    """Refuse PATH, which is or lies in the saved model `folder` (None: in no model)."""
    if folder is None:
        return
    where = "is a saved model's folder" if folder == path.resolve() else f"is inside the saved model {folder}"
    raise HeadswapError(f"{flag} {path} {where}, which holds only what the model's save wrote: give a path "
                        f"outside it")
