"""Shipping auto's winner: blended with the TF-IDF baseline where validation says it pays (headswap.baseline.blend), then
saved as OUT/model, exported to ONNX when its strategy can be."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from headswap.saved import model_dir
from headswap.errors import HeadswapError


def ship(winner, out: Path, quantize: str, log) -> tuple[Path, str | None]:
    """Save the winner as OUT/model (exported to ONNX when it can be); returns (path, why not exported).
    OUT/model is swapped in whole (model_dir.save_into): files a user put there are kept."""
    why = []
    target = model_dir.save_into(out / "model", lambda folder: why.append(_write_winner(winner, folder, quantize,
                                                                                          log)))
    return target, why[0]


def _write_winner(winner, folder: Path, quantize: str, log) -> str | None:
    """Write the winner into the new, empty `folder`; returns why it was not exported (None when it was)."""
    from headswap.baseline.blend import Blend
    from headswap.baseline.tfidf import TfidfClassifier

    if isinstance(winner, Blend):     # the neural member is exported as it would be alone
        why = []
        winner.save(folder, save_model=lambda model, into: why.append(_write_winner(model, into, quantize, log)))
        return why[0]
    if isinstance(winner, TfidfClassifier):
        winner.save(folder)
        return "a TF-IDF model runs on scikit-learn; there is nothing to export"
    if not winner.strategy_.exportable or winner.model_spec_.kind != "encoder":
        winner.save(folder)
        return f"{winner.strategy} on a {winner.model_spec_.kind} model cannot be exported to ONNX"
    try:
        from headswap.classifier.runtime import import_onnxruntime
        import_onnxruntime()
    except HeadswapError as e:
        winner.save(folder)
        return str(e)
    from headswap.jobs.export import export

    staging = Path(tempfile.mkdtemp(prefix=".model-torch-", dir=folder.parent))
    try:
        winner.save(staging)
        try:
            entry = export(staging, folder, quantize=quantize)
        except Exception as e:  # the trained winner must not be lost to a failed export: ship it on torch
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(staging, folder)
            log(f"exporting the winner failed ({type(e).__name__}: {e}); saved it for torch instead")
            return f"export failed: {type(e).__name__}: {e}"
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"exported the winner to ONNX ({entry['quantize']}); its logits differ from torch's by at most "
        f"{entry['check']['max_abs_logit_diff']:.2g} on the check texts")
    return None


def blend_winner(best, entry: dict, baseline, validation, candidates: list, log):
    """(classifier, entry) to ship: `best`, or best blended with the TF-IDF baseline when that scores higher on
    validation (the pass over validation is in the budget's reserve for shipping: Costs.reserve)."""
    from headswap.baseline.blend import fit_blend, same_labels
    row = {"model": entry["model"], "model_name": entry["model_name"], "strategy": f"{entry['strategy']} + tfidf-logreg",
           "regime": entry["regime"], "tier": "blend", **{k: entry[k] for k in ("head", "tuned") if entry.get(k)}}
    why = ("a multi-label winner is not blended" if getattr(best, "multi_label", False) else
           "a winner with an out-of-scope label is not blended: its reject threshold was tuned on its own "
           "probabilities, which averaging would change" if getattr(best, "out_of_scope", None) is not None else
           "the winner's classes are not the baseline's" if not same_labels(best, baseline) else None)
    if why:
        candidates.append({**row, "status": "skipped", "reason": why})
        log(f"  blend with TF-IDF not tried: {why}")
        return best, entry
    t0 = time.perf_counter()
    blend, scores, out_of_fold = fit_blend(best, baseline, validation.texts, validation.labels)
    w = max(scores, key=lambda k: (scores[k], -k))
    row.update({"rung": f"TF-IDF weight {w:g}", "status": "ran" if blend else "not better",
                "seconds": time.perf_counter() - t0, "validation_macro_f1": scores[w],
                "blend_scores": {f"{k:g}": v for k, v in scores.items()}, "out_of_fold_macro_f1": out_of_fold})
    folds = "" if out_of_fold is None else f", out of fold {out_of_fold:.4f}"
    line = (f"validation macro F1 {scores[w]:.4f}{folds}, the winner alone {scores[0.0]:.4f} "
            f"({row['seconds']:.0f} s)")
    candidates.append(row)
    if blend is None:
        row["reason"] = (f"weight {w:g}: {line}; not better than the winner alone out of fold" if w else
                         "no TF-IDF weight scored higher on validation than the winner alone")
        log(f"  blend with TF-IDF not kept (weight {w:g}): {line}")
        return best, entry
    log(f"  blend with TF-IDF (weight {w:g}): {line}")
    return blend, row
