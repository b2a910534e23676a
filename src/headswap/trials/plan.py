"""What a bench or auto run runs: its data (stratified, seeded subsets of a folder's train/validation/test files,
or of one file with the splits held out of it, or splits held in memory) and its rows (each strategy on each model
it fits, trained and, for zero-shot strategies, untrained)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from headswap.data.load import LabelledData, check_eval_labels, check_training_data, load_dataset
from headswap.data.sampling import stratified_split, stratified_subset
from headswap.data.splits import data_files as split_sources
from headswap.errors import ConfigError, DataError
from headswap.settings import defaults
from headswap.strategies import get, names as strategy_names

ZERO_SHOT_REGIME = "zero-shot"
MIN_VALIDATION = 200          # validation.csv is cut to min(len, max(MIN_VALIDATION, train_limit // 5))
EVAL_FRACTION = defaults()["eval_fraction"]   # TextClassifier's hold-out; bench estimates with it, auto holds it out
# How the data options are named in messages: in Python (run_bench, auto) and on the command line.
PYTHON_NAMES = {"data": "data", "test_fraction": "test_fraction"}
CLI_NAMES = {"data": "--data", "test_fraction": "--test-fraction"}


def validation_limit(n_validation: int, train_limit: int | None) -> int:
    """How many validation.csv records best-epoch selection uses: all, unless training is limited."""
    if train_limit is None:
        return n_validation
    return min(n_validation, max(MIN_VALIDATION, train_limit // 5))


@dataclass
class BenchData:
    train: LabelledData
    validation: LabelledData | None
    test: LabelledData | None      # None: no test.csv and no test_fraction (auto runs without a test score)
    sizes: dict                    # per split: file, rows, used, classes, and "source": where it came from


def _split_info(path, full: LabelledData, used: LabelledData, source: str) -> dict:
    return {"file": None if path is None else str(path), "rows": len(full), "used": len(used),
            "classes": dict(sorted(Counter(used.labels).items())), "source": source}


def held_out_source(fraction: float, of: str, seed: int) -> str:
    """Where a held-out split came from, as results.json, results.md and report.html say it."""
    return f"{fraction:.0%} of {of} held out, stratified, seed {seed}"


def train_source(path, held: Sequence[str]) -> str:
    """Where the training split came from: its file, less the splits held out of it."""
    return str(path) + (f" less the {' and '.join(held)} split{'s' if len(held) > 1 else ''}" if held else "")


def check_test_fraction(test_fraction, names: dict = PYTHON_NAMES) -> None:
    """ConfigError unless test_fraction is None or a share strictly between 0 and 1."""
    if test_fraction is None:
        return
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or not 0 < test_fraction < 1:
        raise ConfigError(f"{names['test_fraction']} must be a share of the texts between 0 and 1 (e.g. 0.2), "
                          f"got {test_fraction!r}")


def bench_files(data, test_fraction: float | None = None, *, needs_test: bool = False, who: str = "run_bench",
                names: dict = PYTHON_NAMES) -> dict[str, Path]:
    """{split: path} of `data`, a folder (train.csv, optionally validation.csv and test.csv) or one labelled file
    (the train split, the others held out of it). Refused in one line: a path that is not there, a test_fraction
    that cannot apply (ConfigError), and, with needs_test, data that has no test split."""
    check_test_fraction(test_fraction, names)
    path = Path(data).expanduser()
    if not path.exists():
        raise DataError(f"{names['data']} {data} does not exist: give a labelled CSV, TSV, JSONL or Parquet file, or a folder "
                        "with train.csv (optionally validation.csv and test.csv)")
    try:
        files = split_sources(path, required=("train",), who=who)
    except DataError as e:
        raise DataError(f"{names['data']} {data}: {e}") from None
    if test_fraction is not None and "test" in files:
        raise ConfigError(f"{names['test_fraction']} {test_fraction:g} holds a test split out of the training texts, "
                          f"but {files['test']} is a test split already: leave out {names['test_fraction']} to "
                          "test on it")
    if needs_test and "test" not in files and test_fraction is None:
        hold = f"add {names['test_fraction']} (e.g. 0.2) to hold a stratified, seeded share of it out as the test set"
        if path.is_dir():
            raise DataError(f"{path / 'test.csv'} is missing: {who} scores every row on a test set; put a test.csv "
                            f"in {path}, or {hold.replace('of it', 'of train.csv')}")
        raise DataError(f"{names['data']} {data} is one file, and {who} scores every row on a test set: {hold}")
    return files


def _hold_out_test(data: LabelledData, fraction: float, seed: int) -> tuple[LabelledData, LabelledData]:
    """(rest, test): stratified_split, its messages said of a test split."""
    from headswap.data.once import warn_once
    try:
        rest, test = stratified_split(data, fraction, seed, held_for="test")
    except DataError as e:
        raise DataError(f"{e}; give a folder with a test.csv instead") from None
    seen = set(rest.texts)
    leaked = sum(text in seen for text in test.texts)
    if leaked:
        message = (f"{data.source}: {leaked} of the {len(test)} texts held out for test also appear in the rest "
                   f"(duplicate texts), so the test score is optimistic; remove duplicates to test on unseen texts")
        warn_once(message, message)
    return rest, test


def load_bench_data(data_dir, train_limit: int | None = None, test_limit: int | None = None,
                    seed: int = 0, out_of_scope: str | None = None, *, test_fraction: float | None = None,
                    text_column: str = "text", label_column: str = "label", needs_test: bool = True,
                    who: str = "run_bench") -> BenchData:
    """DIR/train.csv, DIR/validation.csv and DIR/test.csv (those present), or one file as train, cut to stratified
    subsets. test_fraction: that share of train is held out (stratified, seeded) as test first. Without a test
    split, test is None (needs_test: refused instead). Rows labelled out_of_scope may be in the test and
    validation files (the reject option answers them)."""
    files = bench_files(data_dir, test_fraction, needs_test=needs_test, who=who)

    def read(split: str) -> LabelledData:
        return load_dataset(files[split], text_column=text_column, label_column=label_column)

    train_full = read("train")
    check_training_data(train_full)
    test_full, sizes = None, {}
    if "test" in files:
        test_full = read("test")
    elif test_fraction is not None:
        train_full, test_full = _hold_out_test(train_full, test_fraction, seed)
    train = stratified_subset(train_full, train_limit, seed)
    check_training_data(train)
    sizes["train"] = _split_info(files["train"], train_full, train,
                                 train_source(files["train"], ["test"] if test_fraction is not None else []))
    test = None
    if test_full is not None:
        test = stratified_subset(test_full, test_limit, seed)
        check_eval_labels(train.labels, test, out_of_scope)
        sizes["test"] = _split_info(files.get("test"), test_full, test, str(files["test"]) if "test" in files
                                    else held_out_source(test_fraction, files["train"], seed))
    else:
        where = "holds no test.csv" if Path(data_dir).expanduser().is_dir() else "is one file"
        sizes["test"] = {"file": None, "rows": 0, "used": 0,
                         "source": f"none ({Path(data_dir)} {where}, and no test fraction was asked for)"}
    validation = None
    if "validation" in files:
        val_full = read("validation")
        validation = stratified_subset(val_full, validation_limit(len(val_full), train_limit), seed)
        check_eval_labels(train.labels, validation, out_of_scope)
        sizes["validation"] = _split_info(files["validation"], val_full, validation, str(files["validation"]))
    else:
        sizes["validation"] = {"file": None, "note": f"no validation.csv: TextClassifier holds out "
                               f"{EVAL_FRACTION:.0%} of the training subset (stratified, seeded) for best-epoch "
                               "selection",
                               "source": held_out_source(EVAL_FRACTION, "the training subset", seed) + ", by each row"}
    return BenchData(train, validation, test, {k: sizes[k] for k in ("train", "validation", "test")})


def memory_data(train: LabelledData, validation: LabelledData | None = None, test: LabelledData | None = None,
                out_of_scope: str | None = None) -> BenchData:
    """BenchData of splits held in memory (AutoClassifier.fit's), checked as files are: without validation, auto
    holds a tenth of train out; without test, nothing is scored on test."""
    check_training_data(train)
    sizes = {"train": _split_info(None, train, train, "the texts given to fit"),
             "validation": {"file": None, "source": "none given"},
             "test": {"file": None, "rows": 0, "used": 0, "source": "none (fit was given no test texts)"}}
    for split, data in (("validation", validation), ("test", test)):
        if data is not None:
            check_eval_labels(train.labels, data, out_of_scope)
            sizes[split] = _split_info(None, data, data, f"the {split} texts given to fit")
    return BenchData(train, validation, test, sizes)


def parse_strategies(spec) -> list[str]:
    """'all', 'a,b', ['a', 'b'] or ['a,b'] -> strategy names (checked, duplicates dropped, order kept)."""
    if spec is None:
        spec = "all"
    items = [spec] if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for item in items:
        for name in str(item).split(","):
            name = name.strip()
            if not name:
                continue
            if name == "all":     # few-shot strategies (pairs grow with the data) run only when named
                names.extend(n for n in strategy_names() if not get(n).few_shot)
            elif name not in strategy_names():
                raise ConfigError(f"unknown strategy {name!r}; choose from all, {', '.join(strategy_names())}")
            else:
                names.append(name)
    names = list(dict.fromkeys(names))
    if not names:
        raise ConfigError("no strategies given; use --strategies all or a comma-separated list")
    return names


@dataclass
class PlannedRow:
    model: str          # the reference as given (built-in name, folder or .gguf path)
    kind: str           # encoder | causal
    strategy: str
    regime: str         # the training regime, or "zero-shot"
    epochs: int

    @property
    def zero_shot(self) -> bool:
        return self.epochs == 0


def strategy_fits(strategy: str, kind: str) -> str | None:
    """None when `strategy` runs on a model of `kind`; otherwise why not."""
    if get(strategy).needs_causal and kind != "causal":
        return f"{strategy} needs a causal language model; this model is an {kind}"
    if get(strategy).encoder_only and kind != "encoder":
        return f"{strategy} is benchmarked on bidirectional encoders only; this model is a {kind} LM"
    return get(strategy).missing()


def plan_bench(model_kinds: dict[str, str], strategies: Sequence[str], epochs: int = 1, regime: str = "auto",
               zero_shot: bool = True, chunking: bool = False) -> tuple[list[PlannedRow], list[dict]]:
    """The rows to run, in order, and the (model, strategy) combinations skipped, each with a reason. chunking:
    chunk_stride is set, so the strategies that cannot split texts into windows are skipped, not failed."""
    rows, skipped = [], []
    for model, kind in model_kinds.items():
        for strategy in strategies:
            reason = strategy_fits(strategy, kind)
            if not reason and chunking and not get(strategy).chunkable:
                reason = f"{strategy} does not encode each text on its own, so it cannot chunk (chunk_stride)"
            if reason:
                skipped.append({"model": model, "strategy": strategy, "reason": reason})
                continue
            trained_regime = get(strategy).default_regime if regime == "auto" else regime
            if epochs > 0:
                if trained_regime == "head-only" and not get(strategy).has_head:
                    skipped.append({"model": model, "strategy": strategy, "regime": trained_regime,
                                    "reason": f"{strategy} has no separate head to train in the head-only regime"})
                else:
                    rows.append(PlannedRow(model, kind, strategy, trained_regime, epochs))
            if get(strategy).zero_shot and (zero_shot or epochs == 0):
                rows.append(PlannedRow(model, kind, strategy, ZERO_SHOT_REGIME, 0))
            elif epochs == 0:
                skipped.append({"model": model, "strategy": strategy, "regime": ZERO_SHOT_REGIME,
                                "reason": f"epochs=0 and {strategy} has no zero-shot form (its head starts untrained)"})
    return rows, skipped


def classifier_for(p: PlannedRow, settings: dict, **overrides):
    """The row's TextClassifier: the run's settings, the row's strategy, model, regime and epochs."""
    from headswap.classifier.estimator import TextClassifier

    # Zero-shot rows are built in the "full" regime: nothing trains, and no (zero-initialised) LoRA
    # adapters slow the forward pass down or add parameters that do nothing.
    return TextClassifier(**{**settings, "strategy": p.strategy, "model": p.model,
                             "regime": "full" if p.zero_shot else p.regime, "epochs": p.epochs, **overrides})
