"""A saved classifier's directory: headswap_config.json (settings, labels, prompt, history), model.safetensors
(only what training changed) and a README model card. Reading checks every file before anything is built."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from headswap import __version__, settings
from headswap.saved.atomic import atomic_path, replace_dir
from headswap.errors import ConfigError, HeadswapError

CONFIG_FILE, WEIGHTS_FILE, CARD_FILE = "headswap_config.json", "model.safetensors", "README.md"
# The base model's license notice, written when it asks for one (Gemma's Terms of Use: every distribution of a
# Model Derivative, which a classifier trained on Gemma is, comes with a "Notice" text file).
NOTICE_FILE = "NOTICE"
FORMAT_VERSION = 1
# What a save or an export writes into a model directory (and a later save replaces); anything else found
# there (a user's notes, `headswap eval` output) is carried over into the new model, never deleted.
# (oos_statistics.safetensors: headswap.decisions.oos_scores.STATS_FILE, what the mahalanobis and knn scores read)
OWNED = (CONFIG_FILE, WEIGHTS_FILE, CARD_FILE, NOTICE_FILE, "model.onnx", "tokenizer", "checkpoints", "members",
         "oos_statistics.safetensors")

if TYPE_CHECKING:   # torch is imported where weights are read or written: the TF-IDF model reads configs too
    import torch


def trained_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What training changed: every trainable parameter (LoRA adapters, head, trained blocks), plus the
    head's parameters (similarity prototypes, sliced LM head), which are derived from the base at build time.
    Tied parameters are stored once."""
    state, seen = {}, set()
    saved = ("head.",) + tuple(getattr(module, "extra_saved", ()))   # e.g. setfit's tuned, then frozen, body
    for name, p in module.named_parameters():
        if (p.requires_grad or name.startswith(saved)) and p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            state[name] = p.detach().contiguous().clone()
    return state


def write(path: Path, config: dict, module: torch.nn.Module, summary: dict) -> Path:
    from headswap.saved.model_card import write_model_card

    path.mkdir(parents=True, exist_ok=True)
    config = {"format": "headswap", "format_version": FORMAT_VERSION, "headswap_version": __version__, **config}
    from safetensors.torch import save_file
    with atomic_path(path / WEIGHTS_FILE) as tmp:
        save_file(trained_state(module), str(tmp), metadata={"format": "pt"})
    (path / CONFIG_FILE).write_text(json.dumps(config, indent=2, default=str))
    write_model_card(path / CARD_FILE, config, summary)
    notice = (config.get("base_model") or {}).get("notice")
    if notice:
        (path / NOTICE_FILE).write_text(notice + "\n")
    return path


def save_into(out, save) -> Path:
    """save(folder) into OUT atomically: OUT is the old model or the complete new one, and whatever headswap
    did not write there is kept. A write that fails (a full disk) leaves OUT as it was and no temporary files,
    and is one HeadswapError naming OUT and the system's reason."""
    def write(folder: Path) -> None:
        try:
            save(folder)
        except Exception as e:
            reason = os_error_reason(e)
            if reason is None:
                raise
            raise HeadswapError(f"saving the model to {out} failed: {reason}; {out} is as it was") from None

    return replace_dir(out, write, owned=OWNED)


def os_error_reason(e: BaseException) -> str | None:
    """The system's reason (e.g. "No space left on device") when `e` is an I/O failure: an OSError, or
    safetensors' own error type, which wraps one as "... (os error 28)"; None for anything else."""
    import errno
    import os
    import re
    if isinstance(e, OSError):
        return e.strerror or str(e) or type(e).__name__
    code = re.search(r"\(os error (\d+)\)", str(e))
    if code and int(code.group(1)) in errno.errorcode:
        return os.strerror(int(code.group(1)))
    return None


def check_regular(file: Path) -> None:
    """Refuse a model file that exists but is not a regular file (or a link to one): reading a FIFO blocks
    forever, a device or socket is no model file. A missing file is left to the caller to report."""
    import os
    import stat
    try:
        mode = os.stat(file).st_mode
    except (FileNotFoundError, NotADirectoryError):     # missing: the caller says what is missing
        return
    except OSError as e:
        raise HeadswapError(f"{file} cannot be read ({e.strerror}); the model directory is unusable") from None
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        kind = "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else \
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
        raise HeadswapError(f"{file} is {kind}, not a regular file; a model directory holds only regular files")


def check_regular_tree(folder: Path) -> None:
    """check_regular for every file in `folder` and below (a tokenizer folder, a base model's files)."""
    import os
    for root, _dirs, names in os.walk(folder):
        for name in names:
            check_regular(Path(root) / name)


def read_config(path: Path) -> dict:
    cfg_file = path / CONFIG_FILE
    check_regular(cfg_file)
    if not cfg_file.is_file():
        raise HeadswapError(f"{path} is not a saved headswap model: {CONFIG_FILE} is missing")
    try:
        config = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HeadswapError(f"{cfg_file} is corrupt: {e}") from None
    if not isinstance(config, dict):
        raise HeadswapError(f"{cfg_file} is corrupt: expected a JSON object, got {type(config).__name__}")
    if config.get("format") != "headswap":     # say what was found: "format 1" misled when format was "other"
        found = f"format {config['format']!r:.80}" if "format" in config else "no format key"
        raise HeadswapError(f"{cfg_file} is not a headswap model config: it has {found}, a headswap model's "
                            f"has format 'headswap'")
    if config.get("format_version") != FORMAT_VERSION:
        raise HeadswapError(f"{path} was saved by an incompatible headswap version "
                            f"(format_version {config.get('format_version')!r:.40}, this version reads "
                            f"{FORMAT_VERSION})")
    t = config.get("temperature")
    if t is not None and not (_positive(t) or (isinstance(t, list) and t and all(map(_positive, t)))):
        raise HeadswapError(f"{cfg_file} is corrupt: temperature must be a number > 0 (a list of them for "
                            f"multi-label models) or null, got {t!r:.80}")
    th = config.get("thresholds")
    if th is not None and not (isinstance(th, list) and all(_positive(v) and v < 1 for v in th)):
        raise HeadswapError(f"{cfg_file} is corrupt: thresholds must be a list of numbers between 0 and 1 or null, "
                            f"got {th!r:.80}")
    r = config.get("reject_threshold")
    if r is not None and not (_positive(r) and r <= 1):
        raise HeadswapError(f"{cfg_file} is corrupt: reject_threshold must be a number in (0, 1] or null, "
                            f"got {r!r:.80}")
    b = config.get("balance")
    if b is not None and not (isinstance(b, dict) and set(b) == {"tau", "prior"} and _positive(b["tau"])
                              and isinstance(b["prior"], list) and all(map(_positive, b["prior"]))
                              and len(b["prior"]) == len(config.get("labels") or ())):
        raise HeadswapError(f"{cfg_file} is corrupt: balance must be null or {{\"tau\": a number > 0, \"prior\": a "
                            f"share > 0 per label}}, got {b!r:.80}")
    for key, value in (("temperature", t), ("thresholds", th)):
        if isinstance(value, list) and len(value) != len(config.get("labels") or ()):
            raise HeadswapError(f"{cfg_file} is corrupt: {len(value)} {key} for {len(config.get('labels') or ())} "
                                f"labels")
    return config


# The settings that decide what is built, present in every saved config: without one, loading would
# silently build the default instead. (Settings added since, such as multi_label, default to what older
# saves meant.)
_BUILT_FROM = ("strategy", "model", "regime", "pooling", "head", "max_length", "instruction", "epochs", "last_n",
               "lora_r", "lora_alpha", "lora_dropout")
_MISSING = object()


def check_config(path: Path, config: dict) -> None:
    """Raise HeadswapError naming headswap_config.json and the first key that TextClassifier.load reads and
    finds missing or of the wrong type (a hand-edited or damaged file), before anything is built from it."""
    where = path / CONFIG_FILE

    def check(key, value, ok, expected):
        if not ok(value):
            got = "it is missing" if value is _MISSING else f"got {value!r:.80}"
            raise HeadswapError(f"{where} is corrupt: {key} must be {expected}; {got}")

    def optional(ok):
        return lambda v: v is _MISSING or v is None or ok(v)

    def is_number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0

    params = config.get("params", _MISSING)
    check("params", params, lambda v: isinstance(v, dict), "an object of settings")
    for key in _BUILT_FROM:
        check(f"params.{key}", params.get(key, _MISSING), lambda v: v is not _MISSING,
              "set (it decides what is built)")
    try:
        settings.check({k: v for k, v in params.items() if k in settings.defaults()}, saved=True)
    except ConfigError as e:
        raise HeadswapError(f"{where} is corrupt (params): {e}") from None
    check("params.model", params["model"], lambda v: isinstance(v, str) and v, "a model reference")
    check("params.instruction", params["instruction"], optional(lambda v: isinstance(v, str)), "a string or null")
    labels = config.get("labels", _MISSING)
    check("labels", labels, lambda v: isinstance(v, list) and len(v) >= 2 and len(set(map(repr, v))) == len(v)
          and all(isinstance(x, str) and x for x in v), "a list of two or more distinct non-empty strings")
    label_classes(where, config)
    check("descriptions", config.get("descriptions", _MISSING), lambda v: isinstance(v, dict)
          and set(v) == set(labels) and all(isinstance(x, str) for x in v.values()),
          "an object {label: description} for every label")
    check("base_model", config.get("base_model", _MISSING),
          optional(lambda v: isinstance(v, dict) and isinstance(v.get("ref", ""), str)
                   and isinstance(v.get("builtin", False), bool)),
          'an object {"ref": string, "builtin": true or false}')
    for key, ok, expected in (("history", lambda v: isinstance(v, list) and all(isinstance(h, dict) for h in v),
                               "a list of objects"),
                              ("train_seconds", is_number, "a number >= 0"),
                              ("evaluation", lambda v: isinstance(v, dict), "an object or null"),
                              ("body_tuning", lambda v: isinstance(v, dict), "an object or null"),
                              ("export", lambda v: isinstance(v, dict), "an object or null"),
                              ("parent", lambda v: isinstance(v, dict), "an object or null"),
                              ("oos_score", _oos_score_ok, 'an object {"score": one of softmax, energy, '
                               'mahalanobis, knn, "threshold": a number or null, "statistics": a file name or null}'
                               ' or null')):
        check(key, config.get(key, _MISSING), optional(ok), expected)
    _check_label_kind(where, params, config)
    # A chunking model's windows are aggregated as training chose: without the choice it cannot predict.
    chunked = params.get("chunk_stride") is not None
    check("chunk_aggregate", config.get("chunk_aggregate", _MISSING),
          (lambda v: v in ("mean", "max")) if chunked else optional(lambda v: v in ("mean", "max")),
          "mean or max (how a chunked text's window logits are aggregated)")


def label_classes(where: Path, config: dict):
    """classes_ of the saved model whose config (from `where`) this is: its label_values, the caller's labels
    (integers stay integers), or its labels where it has none (earlier saves, or values edited out)."""
    import numpy as np
    labels, values = config["labels"], config.get("label_values")
    if values is not None and not (isinstance(values, list) and len(values) == len(labels) and all(
            isinstance(x, (str, int)) and not isinstance(x, bool) for x in values)):
        raise HeadswapError(f"{where} is corrupt: label_values must be a list of {len(labels)} strings or integers "
                            f"(one per label); got {values!r:.80}")
    values = values or list(labels)
    return np.array(values) if all(isinstance(v, int) for v in values) else np.array(values, dtype=object)


def record_label_values(path: Path, values: dict) -> None:
    """Write into the saved model at `path` (each member of a blend) what each label is to the caller, `values`
    {label: value}, as its label_values: loaded, its classes_ are those values. (auto trains on labels as text, as
    files hold them; AutoClassifier so gives back the integer labels it was given.)"""
    from headswap.saved.atomic import write_text
    config = read_config(path)
    if "members" in config:       # a blend: its classes_ are its lead member's
        for member in config["members"]:
            record_label_values(inside(path, member["folder"], "members"), values)
        return
    config["label_values"] = [values.get(label, label) for label in config["labels"]]
    # (a TF-IDF config holds its vocabularies: written compact, as it saves itself)
    write_text(path / CONFIG_FILE, json.dumps(config, indent=None if config.get("kind") else 2))


def _check_label_kind(where: Path, params: dict, config: dict) -> None:
    """params.multi_label must agree with what calibration saved: a multi-label model has one threshold (and
    temperature, when calibrated) per label, a single-label one no thresholds and one temperature. A flipped
    flag would otherwise answer sigmoid probabilities with no tuned thresholds, or softmax over sets."""
    multi, th, t = params.get("multi_label") is True, config.get("thresholds"), config.get("temperature")
    if multi and th is None:
        raise HeadswapError(f"{where} is corrupt: params.multi_label is true but thresholds is missing (a multi-label "
                            f"model saves one decision threshold per label); this config was edited or is single-label "
                            f"(a multi-label model an earlier headswap trained without validation data: add "
                            f"\"thresholds\": [0.5, ...], one per label)")
    if not multi and th is not None:
        raise HeadswapError(f"{where} is corrupt: thresholds is set but params.multi_label is false (only "
                            f"multi-label models have per-label thresholds)")
    if config.get("balance") is not None and (multi or params.get("out_of_scope") is not None):
        raise HeadswapError(f"{where} is corrupt: balance is set but the model is "
                            + ("multi-label" if multi else "tuned to reject out-of-scope texts")
                            + " (only single-label models without a reject option lean their decisions)")
    if t is not None and multi != isinstance(t, list):
        raise HeadswapError(f"{where} is corrupt: temperature must be " + (
            "a list, one per label, when params.multi_label is true" if multi else
            "one number when params.multi_label is false") + f"; got {t!r:.80}")


def fingerprint(path: Path) -> str:
    """A short id of what a saved model computes: sha256 of its config and weights files (an export's
    graph is covered by the sha256 its config records). Recorded in predictions so a resumed run can tell
    it is continuing with the same model."""
    import hashlib
    h = hashlib.sha256()
    for name in (CONFIG_FILE, WEIGHTS_FILE, OWNED[-1]):
        file = Path(path) / name
        if file.is_file():
            h.update(name.encode() + b"\0")
            with open(file, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()[:16]


def inside(path: Path, name, key: str) -> Path:
    """``path / name`` for a file the config names under ``key``, refused unless it stays inside ``path``
    (an absolute path, ``..`` or a hub id would make loading read elsewhere or go online)."""
    if not isinstance(name, str) or not name:
        raise HeadswapError(f"{path / CONFIG_FILE} is corrupt: {key} must name a file in the model directory, "
                            f"got {name!r:.80}")
    target = (path / name).resolve()
    if not target.is_relative_to(path.resolve()):
        raise HeadswapError(f"{path / CONFIG_FILE}: {key} names {name!r:.120}, which is outside the model "
                            f"directory; a model directory may only name its own files")
    return target


def _oos_score_ok(v) -> bool:
    t = v.get("threshold") if isinstance(v, dict) else None
    return (isinstance(v, dict) and v.get("score") in ("softmax", "energy", "mahalanobis", "knn")
            and (t is None or (isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)))
            and (v.get("statistics") is None or isinstance(v.get("statistics"), str))
            and (v["score"] not in ("mahalanobis", "knn") or bool(v.get("statistics"))))


def _positive(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and 0 < v < float("inf")


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    check_regular(path / WEIGHTS_FILE)
    try:
        return load_file(str(path / WEIGHTS_FILE))
    except Exception as e:  # safetensors raises its own error types for truncated files
        raise HeadswapError(f"{path / WEIGHTS_FILE} cannot be read ({e}); the model directory is corrupt") from None


class WeightsMismatch(HeadswapError):
    """Saved weights that do not fit the module the config builds (TextClassifier.load names both files)."""


def load_weights(module: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Load saved weights into a freshly built module; every tensor training changed must be there."""
    expected = trained_state(module)
    unexpected = sorted(set(weights) - set(module.state_dict()))
    if unexpected:
        raise WeightsMismatch(f"saved weights do not fit this model: unexpected {unexpected[:5]}")
    missing = sorted(set(expected) - set(weights))
    if missing:
        raise WeightsMismatch(f"saved weights lack {len(missing)} of the {len(expected)} tensors this model "
                              f"trains (e.g. {missing[:3]}); the model directory is incomplete or of another regime")
    wrong = [f"{k}: {tuple(weights[k].shape)} saved, {tuple(v.shape)} here" for k, v in expected.items()
             if tuple(weights[k].shape) != tuple(v.shape)]
    if wrong:
        raise WeightsMismatch(f"saved weights have the wrong shape: {'; '.join(wrong[:3])}")
    module.load_state_dict(weights, strict=False)
