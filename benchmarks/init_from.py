"""Training on from a shipped model (init_from) against training once on all the data, back to back in one process.

(a) emotion: a model trained on the first half of train.csv, then trained on from it (init_from) on the other
half, against one model trained from scratch on all of train.csv; validation.csv picks the epoch, test.csv scores.
(b) CLINC150 (its 150 intents; validation.csv, less its out-of-scope rows, is the test set; 10% of each run's
training texts picks the epoch): a model of the first 140 intents (sorted by name), then trained on from it on
the 10 others' texts plus --replay old texts per old intent, against one model trained from scratch on all 150.

Every run is MiniLM `encoder-mlp` at max length 64, what fits a 2-core CPU in minutes: on CLINC150 head-only (a
frozen body, its features computed once per fit); on emotion, whose classes a frozen body separates poorly (head-only
scored 0.66 from scratch), the partial regime on cached lower blocks (its top 2 blocks and head train on the frozen
lower blocks' cached output, as auto's cached-partial arm does), the same 3 epochs in each of the three runs. Each fit's time is wall clock from fit() to return (model load, features,
head training). The scratch run and the init_from run are timed in the same process, one after the other; the
ratios are what to compare on a busy machine. --quick runs a stratified sample of each data set.

    .venv/bin/python benchmarks/init_from.py --only emotion --out benchmarks/results/init_from/emotion.json
    .venv/bin/python benchmarks/init_from.py --only clinc --threads 1 --out benchmarks/results/init_from/clinc150.json
    .venv/bin/python benchmarks/init_from.py --quick --out /tmp/init_from_quick.json     # a sample of each
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.data.sampling import stratified_subset  # noqa: E402

SHARED = next((p / "shared" / "data" for p in Path(__file__).resolve().parents[1:4]
               if (p / "shared" / "data").is_dir()), Path("../shared/data"))
SETTINGS = dict(model="minilm", strategy="encoder-mlp", regime="head-only", max_length=64, epochs=10,
                batch_size=64, head_lr=1e-3, progress=False)
# emotion: the top 2 blocks train too (on the cached output of the 4 below), 3 epochs in every run
EMOTION = dict(regime="partial", last_n=2, cache_lower=True, epochs=3, batch_size=32)


def fit(texts, labels, eval_data=None, init_from=None, **over):
    t0 = time.perf_counter()
    clf = TextClassifier(**{**SETTINGS, **over})
    clf.fit(texts, labels, *(eval_data or ()), init_from=init_from)
    return clf, time.perf_counter() - t0


def scores(clf, texts, labels, classes=None) -> dict:
    """Test accuracy and macro F1 (over `classes` when given: a subset of the labels)."""
    from sklearn.metrics import accuracy_score, f1_score
    pred = clf.predict(texts)
    keep = [i for i, lab in enumerate(labels) if classes is None or lab in classes]
    y, p = [labels[i] for i in keep], [pred[i] for i in keep]
    return {"accuracy": round(float(accuracy_score(y, p)), 4),
            "macro_f1": round(float(f1_score(y, p, labels=sorted(set(y)), average="macro", zero_division=0)), 4),
            "n": len(y)}


def emotion(quick: bool, work: Path) -> dict:
    train, val, test = (load_dataset(SHARED / "emotion" / f"{s}.csv") for s in ("train", "validation", "test"))
    n = 2000 if quick else len(train) // 2
    if quick:
        train = stratified_subset(train, 2 * n, seed=0)
        val, test = stratified_subset(val, 500, seed=0), stratified_subset(test, 1000, seed=0)
    t, y = list(train.texts), list(train.labels)
    eval_data = (val.texts, val.labels)
    first, t_first = fit(t[:n], y[:n], eval_data, **EMOTION)
    first.save(work / "emotion-first")
    on, t_on = fit(t[n:2 * n], y[n:2 * n], eval_data, init_from=work / "emotion-first", **EMOTION)
    scratch, t_scratch = fit(t[:2 * n], y[:2 * n], eval_data, **EMOTION)
    out = {"texts": {"first": n, "init_from": n, "scratch": 2 * n, "test": len(test)},
           "first_half": {"seconds": round(t_first, 1), **scores(first, test.texts, test.labels)},
           "init_from_second_half": {"seconds": round(t_on, 1), **scores(on, test.texts, test.labels)},
           "scratch_all": {"seconds": round(t_scratch, 1), **scores(scratch, test.texts, test.labels)}}
    out["init_from_time_over_scratch"] = round(t_on / t_scratch, 3)
    out["first_plus_init_from_time_over_scratch"] = round((t_first + t_on) / t_scratch, 3)
    out["macro_f1_points_init_from_minus_scratch"] = round(
        100 * (out["init_from_second_half"]["macro_f1"] - out["scratch_all"]["macro_f1"]), 2)
    return out


def clinc(quick: bool, replay: int, work: Path) -> dict:
    train, test = (load_dataset(SHARED / "clinc150" / f"{s}.csv") for s in ("train", "validation"))
    keep = [i for i, lab in enumerate(train.labels) if lab != "oos"]
    texts, labels = [train.texts[i] for i in keep], [train.labels[i] for i in keep]
    if quick:
        per = 30
        rng = np.random.default_rng(0)
        idx = [i for lab in sorted(set(labels)) for i in
               rng.permutation([j for j, x in enumerate(labels) if x == lab])[:per]]
        texts, labels = [texts[i] for i in idx], [labels[i] for i in idx]
    test_t = [t for t, lab in zip(test.texts, test.labels) if lab != "oos"]
    test_y = [lab for lab in test.labels if lab != "oos"]
    intents = sorted(set(labels))
    old, new = set(intents[:140]), set(intents[140:])
    rng = np.random.default_rng(0)
    replayed = {lab: rng.permutation([i for i, x in enumerate(labels) if x == lab])[:replay] for lab in sorted(old)}
    first_idx = [i for i, lab in enumerate(labels) if lab in old]
    on_idx = [i for i, lab in enumerate(labels) if lab in new] + [int(i) for ids in replayed.values() for i in ids]
    first, t_first = fit([texts[i] for i in first_idx], [labels[i] for i in first_idx])
    first.save(work / "clinc-first")
    on, t_on = fit([texts[i] for i in on_idx], [labels[i] for i in on_idx], init_from=work / "clinc-first",
                   class_weight="balanced")
    scratch, t_scratch = fit(texts, labels)
    out = {"texts": {"first": len(first_idx), "init_from": len(on_idx), "scratch": len(texts), "test": len(test_t)},
           "replay_per_old_intent": replay, "new_intents": sorted(new)}
    for name, clf, secs in (("first_140", first, t_first), ("init_from_plus_10", on, t_on),
                            ("scratch_150", scratch, t_scratch)):
        out[name] = {"seconds": round(secs, 1), "old_intents": scores(clf, test_t, test_y, old)}
        if name != "first_140":
            out[name]["new_intents"] = scores(clf, test_t, test_y, new)
            out[name]["all_intents"] = scores(clf, test_t, test_y)
    out["init_from_time_over_scratch"] = round(t_on / t_scratch, 3)
    out["old_macro_f1_points_init_from_minus_scratch"] = round(
        100 * (out["init_from_plus_10"]["old_intents"]["macro_f1"] - out["scratch_150"]["old_intents"]["macro_f1"]), 2)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a stratified sample of each data set (minutes)")
    ap.add_argument("--replay", type=int, default=20, help="CLINC150: old texts per old intent in the init_from run "
                    "(class_weight balanced: the 10 new intents have their 100 texts each)")
    ap.add_argument("--only", choices=("emotion", "clinc"), help="run one of the two")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    result = {"command": " ".join(["benchmarks/init_from.py", *sys.argv[1:]]),
              "settings": {k: v for k, v in SETTINGS.items() if k != "progress"},
              "emotion_settings": EMOTION,
              "init_from_runs": {"clinc150": {"class_weight": "balanced"}},
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads "
                         f"{args.threads}", "date": datetime.now(timezone.utc).isoformat(timespec="minutes")}
    with tempfile.TemporaryDirectory() as work:
        if args.only in (None, "emotion"):
            result["emotion"] = emotion(args.quick, Path(work))
            print(json.dumps(result["emotion"], indent=1), flush=True)
        if args.only in (None, "clinc"):
            result["clinc150"] = clinc(args.quick, args.replay, Path(work))
            print(json.dumps(result["clinc150"], indent=1), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
