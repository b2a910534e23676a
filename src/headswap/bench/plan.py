"""What a bench run runs: its data (stratified, seeded subsets of DIR's train/validation/test files) and
its rows (each strategy on each model it fits, trained and, for zero-shot strategies, untrained)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from headswap.data.load import LabelledData, check_eval_labels, check_training_data, load_dataset
from headswap.data.sampling import stratified_subset
from headswap.data.splits import split_files
from headswap.errors import ConfigError
from headswap.settings import defaults
from headswap.strategies import get, names as strategy_names

ZERO_SHOT_REGIME = "zero-shot"
MIN_VALIDATION = 200          # validation.csv is cut to min(len, max(MIN_VALIDATION, train_limit // 5))
EVAL_FRACTION = defaults()["eval_fraction"]   # TextClassifier's hold-out; bench estimates with it, auto holds it out


def validation_limit(n_validation: int, train_limit: int | None) -> int:
    """How many validation.csv records best-epoch selection uses: all, unless training is limited."""
    if train_limit is None:
        return n_validation
    return min(n_validation, max(MIN_VALIDATION, train_limit // 5))


@dataclass
class BenchData:
    train: LabelledData
    validation: LabelledData | None
    test: LabelledData
    sizes: dict


def _split_info(path: Path, full: LabelledData, used: LabelledData) -> dict:
    return {"file": str(path), "rows": len(full), "used": len(used),
            "classes": dict(sorted(Counter(used.labels).items()))}


def load_bench_data(data_dir, train_limit: int | None = None, test_limit: int | None = None,
                    seed: int = 0, out_of_scope: str | None = None) -> BenchData:
    """DIR/train.csv and DIR/test.csv (DIR/validation.csv when present), cut to stratified subsets. Rows labelled
    out_of_scope may be in the test and validation files (the reject option answers them)."""
    files = split_files(Path(data_dir).expanduser(), required=("train", "test"),
                        who="a bench data folder (columns text,label)")
    train_full = load_dataset(files["train"])
    test_full = load_dataset(files["test"])
    check_training_data(train_full)
    train = stratified_subset(train_full, train_limit, seed)
    test = stratified_subset(test_full, test_limit, seed)
    check_training_data(train)
    check_eval_labels(train.labels, test, out_of_scope)
    sizes = {"train": _split_info(files["train"], train_full, train),
             "test": _split_info(files["test"], test_full, test)}
    validation = None
    if "validation" in files:
        val_full = load_dataset(files["validation"])
        validation = stratified_subset(val_full, validation_limit(len(val_full), train_limit), seed)
        check_eval_labels(train.labels, validation, out_of_scope)
        sizes["validation"] = _split_info(files["validation"], val_full, validation)
    else:
        sizes["validation"] = {"file": None, "note": f"no validation.csv: TextClassifier holds out "
                               f"{EVAL_FRACTION:.0%} of the training subset (stratified, seeded) for best-epoch "
                               "selection"}
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
    return None


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


def _classifier(p: PlannedRow, settings: dict, **overrides):
    """The row's TextClassifier: the run's settings, the row's strategy, model, regime and epochs."""
    from headswap.api import TextClassifier

    # Zero-shot rows are built in the "full" regime: nothing trains, and no (zero-initialised) LoRA
    # adapters slow the forward pass down or add parameters that do nothing.
    return TextClassifier(**{**settings, "strategy": p.strategy, "model": p.model,
                             "regime": "full" if p.zero_shot else p.regime, "epochs": p.epochs, **overrides})
