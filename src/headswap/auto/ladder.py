"""auto's cost ladder: the candidates ("rungs") from cheapest to dearest, what each is estimated to cost, and the
rules that share a time budget among them.

Tiers, in the order they run: the TF-IDF baseline; `static` (no transformer pass); `frozen`: every encoder strategy
whose head trains on the frozen body's pooled features, head-only on features computed once per model (a logistic
regression fitted by scikit-learn, a linear and an MLP head: headswap.nn.inference.feature_cache shares the encoding
pass); `fine-tune`: the encoder strategies in their own regime (full, LoRA); `causal`: the causal models' rungs,
frozen and fine-tuned, last. Within a tier, rungs run cheapest first.

Estimates come from probes (headswap.trials.measure.probe_timing), one per model and cost (a strategy's passes per
text: strategies that read the text alone through the same body in the same regime cost the same and share one),
and are corrected by what the run measures as it goes (Costs.learn).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field

from headswap.trials.plan import PlannedRow, plan_bench
from headswap.strategies import get

TIERS = ("baseline", "static", "frozen", "fine-tune", "causal")
HEAD_EPOCHS = 20          # a frozen rung's head trains this many epochs on cached features (seconds)
HEAD_BATCH = 64           # ... in batches this large: on cached features a step's cost is the loop's own overhead
# (name, head, head_fit) of the frozen rungs: logistic regression is the cheapest head and often the best.
FROZEN_HEADS = (("logistic", "linear", "logistic"), ("linear", "linear", "loop"), ("mlp", "mlp", "loop"))
# scikit-learn's L-BFGS logistic regression, per (text x feature x class) fitted at one C: ~0.7 s an iteration on
# 13,590 x 384 x 151 on 2 loaded cores (measured on synthetic features), times an assumed ~60 iterations a C
# (headswap.train.logistic warm-starts its C grid); Costs.learn corrects it from what runs measure.
LOGISTIC_SECONDS = 5e-8
SHIP_LOADS = 6.0          # saving and ONNX-exporting the winner, in units of the model's load time (at least 2 s)
# ... and at least this: torch.onnx.export traces every block (torch.export, then the translation to ONNX), whatever
# the load took. Exporting and checking a saved model (headswap.jobs.export): 3.7-4.2 s for MiniLM's 6 blocks,
# 8.6-10.7 s for multilingual-e5-small's 12 (idle 2-core Xeon, torch 2.13); in a 15-minute auto run on GermEval 2018
# a blend of two e5 models was saved, exported, loaded and scored on 501 test texts in 29.8 s, where 2 x 36 s were
# kept for it (4.5 s + 2 s a block, counted from an older exporter), and other candidates were priced out.
EXPORT_SECONDS, EXPORT_SECONDS_PER_BLOCK = 3.0, 0.75
# What timing a model not loaded yet is taken to cost before anything is measured (a causal GGUF model is
# converted on its first load: 30-48 s here).
PROBE_GUESS = {"encoder": 10.0, "causal": 30.0}
# A frozen rung whose encoding pass (training and validation texts) is at most this many of its probe's (the probe
# encodes a batch of training texts and times inference on up to 64 of them) is tried, not timed: trying it costs
# about what timing it would, and timing it first pays that twice. The README's one-minute run (300 texts) skipped
# every MiniLM rung as too dear to time, where encoding them all took a few seconds.
TRY_PROBES = 4
PROBE_INFERENCE_TEXTS = 64        # what headswap.trials.measure.probe_timing times inference on, at most
# A fine-tuning arm's probe trains 2 epochs of 4 batches (headswap.auto.climb.Climb.probe). An arm whose epoch is at
# most TRY_PROBES of that is tried, not timed: its first slice (a quarter epoch) trains no more than the probe would.
# On the README's 300 texts (17 batches an epoch) the three MiniLM arms' probes took 21 s of a one-minute run on idle
# cores and left the one arm admitted 5 s; beside `make test` each probe passed its limit and no arm ran at all.
ARM_PROBE_BATCHES = 8
# An untimed arm's training step, in forward passes of its batch (the forward, about twice that backward): MiniLM
# trains 79 emotion texts/s where it predicts 202 (BENCHMARKS.md, idle 2-core), 2.5 passes; its frozen rung's
# encoding pass, what the guess is made from, also counts fitting the head, so it errs dear.
TRAIN_PASSES = 3.0
# Of a probe's guess, what loading the model is taken to be until one is measured: the room to ship a rung is six
# loads, and half of PROBE_GUESS (5 s, where MiniLM loads in 1-3 s on 2 idle to loaded cores) kept 35 s of a
# one-minute run back to ship the MiniLM head it was about to try.
GUESSED_LOAD = 0.25
# The cached-partial rung trains this many top blocks (fewer when the body has no more than that): the blocks below
# run once per text (headswap.train.lower_cache), so its epochs after the first cost a fraction of a full one.
CACHED_TOP = 2


@dataclass
class Rung(PlannedRow):
    tier: str = "fine-tune"
    head: str | None = None        # the head a frozen rung fits (None: the settings' head)
    head_fit: str = "loop"
    name: str = ""                 # the rung's short name in tables: "logistic head", "linear head", "full", ...
    last_n: int | None = None      # a cached-partial rung: the top blocks it trains on cached lower blocks

    def settings(self, base: dict) -> dict:
        """The run's settings with this rung's own on top."""
        out = dict(base)
        if self.head is not None:     # a frozen rung: its head, fitted its way
            out["head"], out["head_fit"] = self.head, self.head_fit
            out["batch_size"] = max(out.get("batch_size") or 0, HEAD_BATCH)
        if self.last_n is not None:
            out["last_n"], out["cache_lower"] = self.last_n, True
        return out

    @property
    def cost_key(self) -> tuple:
        """Rungs with one key cost the same per text: one probe times them all."""
        s = get(self.strategy)
        # Only the pooled-features-and-head strategies cost the same per text; similarity also encodes every class
        # description at each step (on CLINC150's 151 it took 493 s where encoder-mlp's probe said 216).
        group = "plain" if s.frozen_features and not s.prompted else s.name
        return self.model, "partial-cached" if self.last_n else self.regime, group

    @property
    def fine_tuning(self) -> bool:
        return self.regime != "head-only" and self.strategy != "static"


def plan_ladder(model_kinds: dict[str, str], strategies, epochs: int, regime: str = "auto", head: str = "auto",
                chunking: bool = False) -> tuple[list[Rung], list[dict]]:
    """Every rung to consider, in ladder order, and the (model, strategy) pairs that cannot run, with reasons.
    regime/head as the user set them: a regime other than auto keeps only that regime's rungs; a head other than
    auto gives the frozen tier that one head (fitted by the loop)."""
    rows, skipped = plan_bench(model_kinds, strategies, epochs, regime, zero_shot=False, chunking=chunking)
    rungs: list[Rung] = []
    for p in rows:
        s = get(p.strategy)
        causal = p.kind == "causal"
        if p.strategy == "static":
            rungs.append(Rung(p.model, p.kind, p.strategy, p.regime, p.epochs, tier="static", name=p.regime))
            continue
        frozen = s.frozen_features and s.has_head and regime in ("auto", "head-only")
        if frozen:
            heads = FROZEN_HEADS if head == "auto" else ((f"{head} head", head, "loop"),)
            for name, h, how in heads:
                rungs.append(Rung(p.model, p.kind, p.strategy, "head-only", HEAD_EPOCHS if how == "loop" else 1,
                                  tier="causal" if causal else "frozen", head=h, head_fit=how,
                                  name=name if name.endswith("head") else f"{name} head"))
        if frozen and not causal and not s.prompted and p.regime == "full" and regime == "auto":
            blocks = _blocks(p.model)
            if blocks > 1:    # between the frozen heads and full fine-tuning
                rungs.append(Rung(p.model, p.kind, p.strategy, "partial", p.epochs, tier="fine-tune",
                                  name="partial-cached", last_n=min(CACHED_TOP, blocks - 1)))
        if p.regime != "head-only" or not frozen:
            rungs.append(Rung(p.model, p.kind, p.strategy, p.regime, p.epochs, tier="causal" if causal else "fine-tune",
                              name=p.regime))
    order = {t: i for i, t in enumerate(TIERS)}
    # Stable: within a tier the plan's order (models as given, strategies as listed) until estimates re-sort it.
    rungs.sort(key=lambda r: (order[r.tier], r.regime != "head-only"))
    return rungs, skipped


def busy_factor() -> float:
    """How many times longer CPU-bound work takes now than on cores of its own: the runnable tasks per core, the
    more of the last minute's average (os.getloadavg) and of those running now (Linux's /proc/loadavg, sampled for a
    tenth of a second: the minute's average lags a load that has just begun), at least 1; auto's own threads count,
    so a run alone on its cores reads 1. 1 where the platform can tell neither. The cost model's shipping figures were
    measured on idle cores: beside `make test` (load 4.3-5.6 on 2 cores) MiniLM's ONNX export took 13-16 s where
    7.5 s were priced, and a one-minute run ended at 102% of its budget."""
    try:
        load = os.getloadavg()[0]
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    except (OSError, AttributeError):
        return 1.0
    return max(1.0, max(load, _running_now()) / max(cores or 1, 1))


def _running_now(samples: int = 20, every: float = 0.005) -> float:
    """The tasks running or ready to run, this one included, averaged over `samples` reads (0 where unknown)."""
    import time

    seen = []
    try:
        for _ in range(samples):
            with open("/proc/loadavg") as f:
                seen.append(int(f.read().split()[3].split("/")[0]))
            time.sleep(every)
    except (OSError, ValueError, IndexError):
        return 0.0
    return sum(seen) / len(seen)


@functools.lru_cache(maxsize=None)
def _blocks(model: str) -> int:
    """The model's block count from its config (0 when unknown): the cached-partial rung needs one to cache."""
    from headswap.errors import HeadswapError
    from headswap.models import block_count
    try:
        return block_count(model) or 0
    except HeadswapError:
        return 0


@dataclass
class Costs:
    """Probes by cost key, and each model's measured/estimated ratio so far (the correction)."""

    n_train: int
    n_validation: int
    n_test: int
    batch_size: int
    n_classes: int = 2
    probes: dict = field(default_factory=dict)
    factor: dict = field(default_factory=dict)
    encoded: set = field(default_factory=set)     # (model, strategy) whose features are in the feature cache

    def probe(self, rung: Rung) -> dict | None:
        return self.probes.get(rung.cost_key)

    def per_text(self, rung: Rung) -> float:
        """Forward-only seconds per text (inference, and the frozen tier's encoding pass)."""
        p = self.probe(rung)
        return p["inference_seconds_per_text"] if p else 0.0

    def epoch_seconds(self, rung: Rung) -> float:
        """One training epoch with its end-of-epoch validation, corrected."""
        p = self.probe(rung)
        batches = math.ceil(self.n_train / self.batch(rung))
        val = 0.0 if rung.regime == "head-only" else self.n_validation * p["inference_seconds_per_text"]
        return (batches * (p["train_batch_seconds"] or 0.0) + val) * self.factor.get(rung.model, 1.0)

    def batch(self, rung: Rung) -> int:
        return max(self.batch_size, HEAD_BATCH) if rung.head is not None else self.batch_size

    def probe_texts(self, rung: Rung) -> int:
        """The texts a frozen rung's probe (one batch, headswap.trials.measure.probe_timing) encodes: its training
        sample and those it times inference on."""
        sample = min(self.n_train, max(self.batch(rung), self.n_classes))
        return sample + min(sample, PROBE_INFERENCE_TEXTS)

    def tried(self, rung: Rung) -> bool:
        """Whether the rung is tried without a probe: a frozen rung not timed yet whose encoding pass is at most
        TRY_PROBES of its probe's."""
        p = self.probe(rung)
        return (rung.regime == "head-only" and (p is None or bool(p.get("guessed")))
                and self.n_train + self.n_validation <= TRY_PROBES * self.probe_texts(rung))

    def guess_arm(self, rung: Rung) -> bool:
        """Price a fine-tuning rung (and those sharing its cost) without a probe where its epoch trains at most
        TRY_PROBES of its probe's batches, from what a frozen rung of its model measured (its load, its encoding per
        text): a step TRAIN_PASSES forward passes of the trained blocks over its batch, times a text's passes
        (the cross-encoder's one per class; similarity's class descriptions encoded beside each batch). False where
        it was not (a dearer epoch, or no frozen rung of the model measured): then it is timed. The arm's slices
        correct the guess (policy.Halving measures every slice)."""
        steps = math.ceil(self.n_train / self.batch(rung))
        if rung.regime == "head-only" or steps > TRY_PROBES * ARM_PROBE_BATCHES:
            return False
        p = next((p for (model, regime, _), p in self.probes.items()
                  if model == rung.model and regime == "head-only" and not p.get("guessed")), None)
        if p is None:
            return False
        per_text = p["inference_seconds_per_text"]
        passes = get(rung.strategy).passes_per_text(self.n_classes).split()[0]      # as the probe reads it
        passes = int(passes) if passes.isdigit() else 1
        extra = self.n_classes if rung.strategy == "similarity" else 0       # class descriptions, at every step
        blocks = _blocks(rung.model)
        trained = rung.last_n / blocks if rung.last_n and blocks > rung.last_n else 1.0
        batch = TRAIN_PASSES * trained * (self.batch(rung) * passes + extra) * per_text
        # What a slice costs outside its training loop's time limit, priced high until its first slice measures it
        # (policy.Halving): the step it was in, the checkpoint it leaves (the weights and AdamW's two moments: three
        # times saving the model for torch, torch_save_seconds), and the rest (tokenizing, the last validation,
        # calibrating) taken as the frozen body's pass over the texts. Counting the step and checkpoint alone, a
        # first slice beside `make test` ran 21.9 s where 15.8 s were planned and the run ended at 105% of its
        # budget (MiniLM's 347-MB checkpoint took 2.1 s, a step 1.5 s, at a load of 4.2).
        fixed = batch + 3 * 2 * p["load_seconds"] + (self.n_train + self.n_validation) * per_text
        self.probes[rung.cost_key] = {**self._measured(p["load_seconds"], per_text * passes, guessed=True),
                                      "train_batch_seconds": batch, "train_startup_seconds": fixed}
        return True

    def guess(self, rung: Rung, probe_guess: float, load: float | None) -> None:
        """Price an untimed frozen rung (and those sharing its cost) from what its probe is guessed to take
        (`probe_guess`: PROBE_GUESS, or the model's last probe): its load (`load`, as measured; unknown,
        GUESSED_LOAD of the guess), the rest the probe's texts' encoding. Its estimate and reserve then read this guess until it runs
        (learn_tried)."""
        load = min(GUESSED_LOAD * probe_guess if load is None else load, probe_guess)
        self.probes[rung.cost_key] = self._measured(load, (probe_guess - load) / self.probe_texts(rung), guessed=True)

    def learn_tried(self, rung: Rung, load: float, train: float) -> None:
        """A rung tried without a probe took `load` seconds to load and `train` to encode and fit: what its probe
        would have said, for the rungs that share its cost (they reuse its encoding) and for shipping it. Encoding
        and fitting together, per text: an upper bound on the pass alone."""
        self.probes[rung.cost_key] = self._measured(load, train / max(self.n_train + self.n_validation, 1))

    @staticmethod
    def _measured(load: float, per_text: float, guessed: bool = False) -> dict:
        return {"load_seconds": load, "train_batch_seconds": None, "train_startup_seconds": 0.0,
                "inference_seconds_per_text": per_text, "feature_dim": None, "probe_seconds": 0.0,
                "tried": True, "guessed": guessed}

    def load_seconds(self, rung: Rung) -> float:
        return self.probe(rung)["load_seconds"]

    def estimate(self, rung: Rung, epochs: int | None = None) -> float:
        """Seconds to train the rung (load, encoding pass for a frozen rung, epochs); scoring test is reserve()'s."""
        p = self.probe(rung)
        epochs = rung.epochs if epochs is None else epochs
        train = (p.get("train_startup_seconds") or 0.0) + epochs * self.epoch_seconds(rung)
        if rung.regime == "head-only" and (rung.model, rung.strategy) not in self.encoded:
            train += self.forward_pass(rung)     # the frozen body's pass over every text, once
        train += self.lower_pass(rung)
        if rung.head_fit == "logistic":     # its C's path on each fold of at most CV_TEXTS, then one C on all
            from headswap.train.logistic import C_GRID, CV_FOLDS, CV_TEXTS
            fitted = len(C_GRID) * (CV_FOLDS - 1) * min(self.n_train, CV_TEXTS) + self.n_train
            train += LOGISTIC_SECONDS * fitted * (p.get("feature_dim") or 768) * self.n_classes
        return p["load_seconds"] + train

    def forward_pass(self, rung: Rung) -> float:
        """One forward pass of the model over every training and validation text, corrected."""
        return (self.n_train + self.n_validation) * self.per_text(rung) * self.factor.get(rung.model, 1.0)

    def lower_pass(self, rung: Rung) -> float:
        """A cached-partial rung's one pass of its frozen lower blocks over every text (0 for other rungs): that
        share of the blocks of a forward pass."""
        if not rung.last_n:
            return 0.0
        blocks = _blocks(rung.model)
        return self.forward_pass(rung) * ((blocks - rung.last_n) / blocks if blocks > rung.last_n else 1.0)

    def reserve(self, rung: Rung) -> float:
        """What must stay free for the rung to be shipped if it wins: saving/exporting it, then loading it back and
        scoring test. Blending needs no pass over validation: each candidate kept its probabilities there."""
        return self.save_seconds(rung) + self.reload_seconds(rung)

    def torch_reserve(self, rung: Rung) -> float:
        """What shipping the rung as a member of a blend must have: saving it for torch, loading it back, scoring
        test. Its ONNX export is optional, asked of the budget when it comes (headswap.auto.ship.Prices.export): a
        one-minute run on loaded cores priced each MiniLM head at its 8-s export, had 11 s left, and shipped TF-IDF
        alone where saving the heads for torch took a second each."""
        return self.torch_save_seconds(rung) + self.reload_seconds(rung)

    def _load(self, rung: Rung) -> float:
        p = self.probe(rung)
        return p["load_seconds"] - p.get("distill_seconds", 0.0)    # static's table is cached once distilled

    def save_seconds(self, rung: Rung) -> float:
        """Saving the rung's model, and exporting it to ONNX where its strategy can be: from the load its probe
        measured (the export is the optional part ship.Prices asks the budget about)."""
        load = self._load(rung)
        ship = max(2.0, SHIP_LOADS * load) if get(rung.strategy).exportable else self.torch_save_seconds(rung)
        if get(rung.strategy).exportable and rung.kind == "encoder" and rung.tier != "static":   # traced by block
            ship = max(ship, EXPORT_SECONDS + EXPORT_SECONDS_PER_BLOCK * _blocks(rung.model))
        return ship

    def torch_save_seconds(self, rung: Rung) -> float:
        """Saving the rung's model for torch, not exported: twice its load."""
        return 2 * self._load(rung)

    def reload_seconds(self, rung: Rung) -> float:
        """Loading the saved model back and scoring it on test, from its probe's measured load and inference."""
        return self._load(rung) + 1.5 * self.n_test * self.probe(rung)["inference_seconds_per_text"]

    def learn(self, rung: Rung, estimated: float, measured: float) -> None:
        """Correct the model's later estimates by what this run took against its estimate (bounded: one noisy
        run must not stop everything)."""
        if estimated > 0 and measured > 0:
            ratio = self.factor.get(rung.model, 1.0) * measured / estimated
            self.factor[rung.model] = min(max(ratio, 0.5), 3.0)

    def eval_every(self, rung: Rung, epochs: int) -> int:
        """Validate every N steps: about four times an epoch, and at most a fifth of the training time."""
        steps = math.ceil(self.n_train / self.batch(rung))
        p = self.probe(rung)
        batch_s = p["train_batch_seconds"] or 0.0
        val_s = self.n_validation * p["inference_seconds_per_text"]
        cheapest = math.ceil(val_s / (0.2 * batch_s)) if batch_s > 0 else steps
        return max(1, min(steps, max(math.ceil(steps / 4), cheapest)))
