"""Shipping auto's winner: blended with other candidates and the TF-IDF baseline where validation says it pays
(headswap.baseline.blend), then saved as OUT/model, each neural model exported to ONNX when its strategy can be."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from headswap.auto.budget import Budget, shown
from headswap.auto.records import Entry, Status
from headswap.reports.report_text import duration
from headswap.saved import model_dir
from headswap.errors import HeadswapError

if TYPE_CHECKING:
    from headswap.auto.ladder import Costs


@dataclass
class Prices:
    """Shipping's optional steps (the blend, each ONNX export) priced from what the run measured: Costs.save_seconds
    and reload_seconds of each shipped model's rung, from the load and inference its probe timed, on cores as busy as
    now (ladder.busy_factor), an export no less than this run's last export of that model took. Each step asks the
    budget before it starts; one that does not fit is skipped, said in the log and in results.json's
    auto.shipping.skipped, and what the run has ships: a model not exported is saved for torch."""
    budget: Budget
    costs: Costs | None = None
    rungs: dict = field(default_factory=dict)      # id(model) -> the rung it ran, for each model priced
    took: dict = field(default_factory=dict)       # model name -> seconds its last export took in this run

    @classmethod
    def of(cls, best, entry: Entry, budget: Budget, costs: Costs | None) -> Prices:
        """The prices of shipping `best` (a Blend: its members; its entry's plan holds their rungs in order)."""
        from headswap.baseline.blend import Blend

        blend = isinstance(best, Blend)
        pairs = zip([m for m, _ in best.members_], entry.plan or ()) if blend else [(best, entry.plan)]
        return cls(budget, costs, {id(m): r for m, r in pairs if r is not None and costs is not None
                                   and costs.probe(r) is not None})

    def reload(self, busy: float | None = None) -> float:
        """Loading every priced model back and scoring test: what follows any export (on cores `busy` times as
        loaded as idle ones; None: as they are now)."""
        return _busy(busy) * sum(self.costs.reload_seconds(r) for r in self.rungs.values())

    def shipping(self) -> float:
        """Saving every priced model for torch and reloading it: shipping them as they are, not exported."""
        return sum(self.costs.torch_save_seconds(r) for r in self.rungs.values()) + self.reload()

    def export_seconds(self, rung, busy: float | None = None) -> float:
        """Saving and exporting `rung`'s model: its price on cores as busy as now (or `busy`), or what its model's
        last export in this run took, whichever is more (two frozen heads on one body export the body twice)."""
        return max(_busy(busy) * self.costs.save_seconds(rung), self.took.get(rung.model, 0.0))

    def exported(self, model, seconds: float) -> None:
        """`model`'s export took `seconds`: the next export of its body is priced no lower."""
        rung = self.rungs.get(id(model))
        if rung is not None:
            self.took[rung.model] = seconds

    def blend(self) -> str | None:
        """Why no blend is tried (None: it may be): it adds members to ship, and is tried only while what is left
        holds shipping the winner alone."""
        if not self.rungs:
            return None
        cost = self.shipping()        # once: it samples the machine's load for a tenth of a second
        if self.budget.affords(cost):
            return None
        return self._skip("blend", f"shipping the winner alone takes about {duration(cost)}, and "
                                   f"{shown(self.budget.left())} are left besides the finish")

    def export(self, model) -> str | None:
        """Why `model` is not exported to ONNX for want of time (None: its export fits, or nothing prices it)."""
        rung = self.rungs.get(id(model))
        if rung is None:
            return None
        busy = _busy(None)        # read once: it samples the machine for a tenth of a second
        cost, then = self.export_seconds(rung, busy), self.reload(busy)
        if self.budget.affords(cost, then):
            return None
        return self._skip("onnx export", f"not exported to ONNX for want of time: exporting it takes about "
                                         f"{duration(cost)} and loading it back and scoring test {duration(then)}"
                                         f"{f' on cores {busy:.1f} times as busy as idle ones' if busy > 1 else ''}"
                                         f", and {shown(self.budget.left())} are left besides the finish")

    def _skip(self, step: str, why: str) -> str:
        self.budget.skip_shipping(step, why)
        return why


def _busy(busy: float | None) -> float:
    from headswap.auto.ladder import busy_factor
    return busy_factor() if busy is None else busy


def ship(winner, out: Path, quantize: str, log, prices: Prices | None = None) -> tuple[Path, str | None]:
    """Save the winner as OUT/model (exported to ONNX when it can be, and `prices` say the time left pays for it);
    returns (path, why not exported). OUT/model is swapped in whole (model_dir.save_into): files a user put there
    are kept."""
    why = []
    target = model_dir.save_into(out / "model", lambda folder: why.append(_write_winner(winner, folder, quantize,
                                                                                          log, prices)))
    return target, why[0]


def _write_winner(winner, folder: Path, quantize: str, log, prices: Prices | None = None) -> str | None:
    """Write the winner into the new, empty `folder`; returns why it was not exported (None when it was)."""
    from headswap.baseline.blend import Blend
    from headswap.baseline.tfidf import TfidfClassifier

    if isinstance(winner, Blend):     # each neural member is exported as it would be alone
        why = []
        winner.save(folder, save_member=lambda model, into: model.save(into) if isinstance(model, TfidfClassifier)
                    else why.append(_write_winner(model, into, quantize, log, prices)))
        return next((w for w in why if w is not None), None)
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
    late = prices.export(winner) if prices is not None else None
    if late is not None:      # the run would overrun: it ships what it has, saved for torch
        log(f"  {late}; saved for torch")
        winner.save(folder)
        return late
    from headswap.jobs.export import export

    staging = Path(tempfile.mkdtemp(prefix=".model-torch-", dir=folder.parent))
    took = prices.budget.stopwatch() if prices is not None else None
    try:
        winner.save(staging)
        try:
            entry = export(staging, folder, quantize=quantize)
            if took is not None:
                prices.exported(winner, took())
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


def blend_winner(best, entry: Entry, climb, baseline, validation, candidates: list, log, train_labels=None,
                 summary: dict | None = None, blend: bool = True):
    """(classifier, entry) to ship: `best`, or a blend of it with the other kept candidates (climb.pool) and the
    TF-IDF baseline, chosen on their validation probabilities by greedy ensemble selection
    (headswap.baseline.blend.select) and kept only when held-out folds of validation prefer it to the best alone
    (not tried when `blend` is False). The blend is chosen first; while the time left does not pay for shipping its
    members too (Costs.torch_reserve of their rungs: saved for torch, each export asked for when it comes), its
    least-weighted dear member is left out and the blend chosen again. Given the training texts' labels, what
    ships then has its decisions leaned toward the rarer classes where the same folds prefer that (lean_decisions;
    what it found goes in summary["decisions"])."""
    from headswap.baseline.blend import select
    from headswap.decisions.balance import class_shares

    row = Entry(entry.model, entry.model_name, f"{entry.strategy} + blend", entry.regime, "blend",
                head=entry.head or None, tuned=entry.tuned or None)
    why = _not_blended(best, baseline)
    mine = next((c for c in climb.pool if c.entry is entry), None)
    leans = (train_labels is not None and not getattr(best, "multi_label", False)
             and getattr(best, "out_of_scope", None) is None and best is not baseline)
    index = {str(lab): k for k, lab in enumerate(best.labels_)}
    y = np.array([index[str(v)] for v in validation.labels]) if leans or not why else None
    prior = class_shares(train_labels, index) if leans else None
    def not_tried(why: str) -> None:
        row.skip(why)
        candidates.append(row)
        log(f"  blend not tried: {why}")

    if why or not blend:
        if why:
            not_tried(why)
        if prior is not None and mine is not None:
            chosen = select([mine.proba], y, list(index), picked_from=[mine.picked_from], prior=prior)
            lean_decisions(best, entry, mine.proba, chosen, y, prior, summary, log)
        return best, entry
    t0 = time.perf_counter()
    left = climb.budget.left()      # recorded: whether the arms left the room they kept for a second member
    offered, price, priced_out = _offered(best, entry, mine, climb, baseline, candidates[0], validation)
    if len(offered) < 2:        # the baseline leads and no candidate beside it can ship: nothing to blend
        if priced_out:
            not_tried("the time left pays for shipping none of the candidates to blend with: " + ", ".join(priced_out))
        return best, entry
    chosen, cols = _choose(best, offered, price, priced_out, y, list(index), prior, climb.budget)
    line = _record(row, chosen, offered, candidates[0], priced_out, left, t0)
    candidates.append(row)
    if not chosen.kept:
        row.reason = (f"{line}; not better than the best alone out of fold" if chosen.out_of_fold is not None
                      else "no blend scored higher on validation than the winner alone")
        log(f"  blend not kept: {row.reason}")
        if prior is not None:
            lean_decisions(best, entry, offered[0].proba, chosen, y, prior, summary, log)
        return best, entry
    shipped = _blend(offered, chosen.weights, row)
    log(f"  blend: {line}")
    if prior is not None:
        proba = sum(w * np.asarray(c.proba)[:, k] for c, k, w in zip(offered, cols, chosen.weights) if w > 0)
        lean_decisions(shipped, row, proba, chosen, y, prior, summary, log)
    return shipped, row


def _not_blended(best, baseline) -> str | None:
    """Why the winner cannot be blended with the others (None: it can)."""
    from headswap.baseline.blend import same_labels

    return ("a multi-label winner is not blended" if getattr(best, "multi_label", False) else
            "a winner with an out-of-scope label is not blended: its reject threshold was tuned on its own "
            "probabilities, which averaging would change" if getattr(best, "out_of_scope", None) is not None else
            "the winner's classes are not the baseline's" if not same_labels(best, baseline) else None)


def _offered(best, entry: Entry, mine, climb, baseline, baseline_entry: Entry, validation) -> tuple[list, list, list]:
    """(the candidates offered to the blend: the best first, then each kept one whose shipping fits beside the best's,
    then the TF-IDF baseline; what shipping each takes; those the time left could not pay for, saying so)."""
    from headswap.auto.climb import Candidate
    from headswap.baseline.blend import same_labels

    offered = [Candidate(entry, best, mine.proba if mine is not None else best.predict_proba(validation.texts),
                         mine.picked_from if mine is not None else [])]
    price, priced_out = [0.0], []
    for c in climb.pool:
        if c is mine:
            continue
        cost = climb.costs.torch_reserve(c.entry.plan) if c.entry.plan is not None else 0.0
        if climb.budget.spare_to_ship(cost) < 0:        # not even beside the best alone
            priced_out.append(f"{c.entry.label} (shipping it too: {duration(cost)})")
            continue
        model = c.loaded()
        if same_labels(best, model):       # (the baseline's labels were checked before)
            offered.append(Candidate(c.entry, model, c.proba, c.picked_from))
            price.append(cost)
    if best is baseline:
        return offered, price, priced_out
    offered.append(Candidate(baseline_entry, baseline, baseline.predict_proba(validation.texts)))
    return offered, price + [0.0], priced_out


def _choose(best, offered: list, price: list, priced_out: list, y, labels: list, prior, budget) -> tuple:
    """(the blend select() chooses among `offered`, the columns of each one's probabilities that are best's): chosen
    again, its least-weighted dear member left out (and said in `priced_out`), while the time left does not pay
    for shipping its members beside the best."""
    from headswap.baseline.blend import columns, select

    while True:
        cols = [columns(best, c.model) for c in offered]
        chosen = select([np.asarray(c.proba)[:, k] for c, k in zip(offered, cols)], y, labels,
                        picked_from=[[np.asarray(q)[:, k] for q in c.picked_from] for c, k in zip(offered, cols)],
                        prior=prior)
        dear = [k for k, w in enumerate(chosen.weights) if w > 0 and price[k] > 0]
        if not chosen.kept or not dear or budget.spare_to_ship(sum(price[k] for k in dear)) >= 0:
            return chosen, cols
        # Priced after the choice, not in the pool's order: at 15 minutes on GermEval 2018 the room for one more
        # model went to the pool's next best, and the frozen MLP head, which the blend would have taken, was out.
        k = min(dear, key=lambda k: (chosen.weights[k], -price[k]))
        priced_out.append(f"{offered[k].entry.label} (shipping it too: {duration(price[k])})")
        del offered[k], price[k]


def _record(row: Entry, chosen, offered: list, tfidf: Entry, priced_out: list, left: float, t0: float) -> str:
    """The blend's row (`chosen` among `offered`, `left` seconds left when it began at `t0`); the line that says it."""
    names = [c.entry.label if c.entry is not tfidf else "TF-IDF" for c in offered]
    row.status, row.seconds = Status.RAN if chosen.kept else Status.NOT_BETTER, time.perf_counter() - t0
    row.validation_macro_f1, row.out_of_fold_macro_f1 = chosen.score, chosen.out_of_fold
    row.alone_out_of_fold_macro_f1 = chosen.alone_out_of_fold
    row.members = [{"candidate": n, "weight": w} for n, w in zip(names, chosen.weights) if w > 0]
    row.rung, row.left_seconds = f"blend of {sum(w > 0 for w in chosen.weights)}", round(left, 1)
    row.priced_out = priced_out or None
    mix = " + ".join(f"{w:.2f} {n}" for n, w in zip(names, chosen.weights) if w > 0)
    folds = ("" if chosen.out_of_fold is None else
             f"; out of fold {chosen.out_of_fold:.4f}, the best alone {chosen.alone_out_of_fold:.4f}")
    return f"{mix}: validation macro F1 {chosen.score:.4f}{folds} ({row.seconds:.0f} s)"


def _blend(offered: list, weights: list, row: Entry):
    """The Blend of the members `weights` keeps, each cleared of an arm's slicing; its strategy named in `row`."""
    from headswap.auto.runners import clean_for_shipping
    from headswap.baseline.blend import Blend

    members = [(c.model, w) for c, w in zip(offered, weights) if w > 0]
    row.plan = tuple(c.entry.plan for c, w in zip(offered, weights) if w > 0)    # Prices.of reads them in order
    if row.regime == "baseline":      # led by the baseline: the row is named as the Blend is, by its lead model
        lead = next((c.entry for c, w in zip(offered, weights) if w > 0 and c.entry.regime != "baseline"), None)
        if lead is not None:
            row.model, row.model_name, row.regime, row.head = lead.model, lead.model_name, lead.regime, lead.head
    for m, _ in members:
        if hasattr(m, "set_params") and hasattr(m, "checkpoint_dir"):
            clean_for_shipping(m)
    blend = Blend(members)
    row.strategy = blend.strategy
    return blend


def lean_decisions(model, entry: Entry, proba, chosen, y, prior, summary: dict | None, log) -> None:
    """Lean `model`'s decisions toward the rarer classes (headswap.decisions.balance), with the tau tuned on its
    validation probabilities `proba` (class indices y), where `chosen`'s held-out folds (blend.select given the
    prior) score that above the argmax; what it found goes in summary["decisions"] either way. (blend_winner gives
    no prior for a multi-label model or one with a reject option: they keep their own decisions.)"""
    from headswap.decisions.balance import best_tau, decide
    from headswap.metrics import confusion_matrix, macro_f1

    tau = best_tau(proba, y, prior)
    scored = [float(macro_f1(confusion_matrix(y, decide(proba, prior, t), len(prior)))) for t in (0.0, tau)]
    before, after = chosen.shipped_out_of_fold
    kept = bool(tau) and chosen.lean_pays
    found = {"tau": tau, "kept": kept, "argmax_macro_f1": scored[0], "validation_macro_f1": scored[1],
             "argmax_out_of_fold_macro_f1": before, "out_of_fold_macro_f1": after}
    if summary is not None:
        summary["decisions"] = found
    if not tau:
        log("  decisions: the argmax (leaning toward the rarer classes does not raise validation macro F1)")
        return
    line = (f"leaning toward the rarer classes (tau {tau:g}): validation macro F1 {scored[0]:.4f} -> {scored[1]:.4f}"
            + ("" if before is None or after is None else f", out of fold {before:.4f} -> {after:.4f}"))
    if kept:
        model.balance_step_.set(tau, prior)
        entry.balance = {"tau": tau}
        log(f"  decisions: {line}")
    else:
        log(f"  decisions: the argmax; {line}")
