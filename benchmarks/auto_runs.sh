#!/usr/bin/env bash
# auto at 15 and 5 minutes on the shared data, one run at a time on an idle machine; each run's results.json is kept
# as benchmarks/results/auto_policy/NAME.json (and its arms chart as NAME-arms.png).
#
#   bash benchmarks/auto_runs.sh clinc150-oos-15m clinc150-15m emotion-15m ...
#
# CLINC150 and GermEval 2018 keep their test splits back: a folder of links presents validation.csv as test.csv, and
# auto holds a stratified tenth of train.csv out to choose on.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-$PWD/../shared/data}
RESULTS=${RESULTS:-benchmarks/results/auto_policy}
mkdir -p "$RESULTS" /tmp/auto-runs/clinc150 /tmp/auto-runs/germeval2018
for d in clinc150 germeval2018; do
    ln -sf "$DATA/$d/train.csv" /tmp/auto-runs/$d/train.csv
    ln -sf "$DATA/$d/validation.csv" /tmp/auto-runs/$d/test.csv
done
OOS=(--out-of-scope oos --reject-metric oos_recall --reject-target 0.8)
for name in "$@"; do
    case $name in
        clinc150-oos-*) data=/tmp/auto-runs/clinc150; extra=("${OOS[@]}") ;;
        clinc150-*) data=/tmp/auto-runs/clinc150; extra=() ;;
        germeval2018-*) data=/tmp/auto-runs/germeval2018; extra=() ;;
        emotion-*) data=$DATA/emotion; extra=() ;;
        sms_spam-*) data=$DATA/sms_spam; extra=() ;;
        *) echo "unknown run $name" >&2; exit 2 ;;
    esac
    budget=$(echo "$name" | grep -oE '[0-9]+m' | tail -1)
    out=/tmp/auto-runs/out-$name
    rm -rf "$out"
    /usr/bin/time -f "%e s wall" -o "$out.time" .venv/bin/headswap auto --data "$data" --budget "$budget" \
        "${extra[@]}" --out "$out" -q > "$out.log" 2>&1 || { echo "$name failed: see $out.log" >&2; continue; }
    cp "$out/results.json" "$RESULTS/$name.json"
    [ -f "$out/arms.png" ] && cp "$out/arms.png" "$RESULTS/$name-arms.png"
    echo "$name: $(cat "$out.time")"
done
