#!/usr/bin/env bash
# auto at 15 and 5 minutes on the shared data, one run at a time on an idle machine; each run's results.json is kept
# as RESULTS/NAME.json (and its arms chart as NAME-arms.png; RESULTS: benchmarks/results/auto_policy by default).
#
#   bash benchmarks/auto_runs.sh clinc150-oos-15m clinc150-15m emotion-15m hwu64-15m ...
#   LOSO=1 bash benchmarks/auto_runs.sh germeval2018-15m hwu64-15m
#
# CLINC150 and GermEval 2018 keep their test splits back: a folder of links presents validation.csv as test.csv, and
# auto holds a stratified tenth of train.csv out to choose on (HWU64 has no validation.csv: the same tenth, and its
# own test.csv). LOSO=1 judges auto on data its prior never saw: before each run, benchmarks/build_prior.py builds
# the prior without that run's data set (/tmp/auto-runs/prior-without-SET.json; a set no recorded run used, such as
# HWU64 at first, leaves the full table) and the run gets it with --prior; results go to
# benchmarks/results/auto_loso/ unless RESULTS says otherwise, and each results.json names its prior (auto.prior).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-$PWD/../shared/data}
LOSO=${LOSO:-0}
[ "$LOSO" = 1 ] && KEPT=benchmarks/results/auto_loso || KEPT=benchmarks/results/auto_policy
RESULTS=${RESULTS:-$KEPT}
mkdir -p "$RESULTS" /tmp/auto-runs/clinc150 /tmp/auto-runs/germeval2018
for d in clinc150 germeval2018; do
    ln -sf "$DATA/$d/train.csv" /tmp/auto-runs/$d/train.csv
    ln -sf "$DATA/$d/validation.csv" /tmp/auto-runs/$d/test.csv
done
OOS=(--out-of-scope oos --reject-metric oos_recall --reject-target 0.8)
for name in "$@"; do
    case $name in
        clinc150-oos-*) dataset=clinc150; data=/tmp/auto-runs/clinc150; extra=("${OOS[@]}") ;;
        clinc150-*) dataset=clinc150; data=/tmp/auto-runs/clinc150; extra=() ;;
        germeval2018-*) dataset=germeval2018; data=/tmp/auto-runs/germeval2018; extra=() ;;
        emotion-*) dataset=emotion; data=$DATA/emotion; extra=() ;;
        sms_spam-*) dataset=sms_spam; data=$DATA/sms_spam; extra=() ;;
        hwu64-*) dataset=hwu64; data=$DATA/hwu64; extra=() ;;
        *) echo "unknown run $name" >&2; exit 2 ;;
    esac
    if [ "$LOSO" = 1 ]; then     # the recorded runs as they stand now, less every run on this set
        prior=/tmp/auto-runs/prior-without-$dataset.json
        .venv/bin/python benchmarks/build_prior.py --without "$dataset" --out "$prior" >&2 \
            || { echo "$name: no prior without $dataset" >&2; continue; }
        extra+=(--prior "$prior")
    fi
    budget=$(echo "$name" | grep -oE '[0-9]+m' | tail -1)
    out=/tmp/auto-runs/out-$name
    rm -rf "$out"
    /usr/bin/time -f "%e s wall" -o "$out.time" .venv/bin/headswap auto --data "$data" --budget "$budget" \
        "${extra[@]}" --out "$out" -q > "$out.log" 2>&1 || { echo "$name failed: see $out.log" >&2; continue; }
    cp "$out/results.json" "$RESULTS/$name.json"
    [ -f "$out/arms.png" ] && cp "$out/arms.png" "$RESULTS/$name-arms.png"
    echo "$name: $(cat "$out.time")"
done
