#!/usr/bin/env bash
# headswap auto end to end on a lent GPU machine (its own python3 with torch; no registry there): MiniLM
# (all-MiniLM-L6-v2), SMS spam, 3 minutes; results.json and results.md come back in $OUT.
# Made on the development machine first, in the ignored folder .whl/ that the device tool carries:
#   the gguf wheel (pip download --no-deps ... gguf==0.19.0 -d .whl, as the device README says),
#   .whl/sms/{train,test}.csv (../shared/data/sms_spam), and .whl/minilm/: the model folder's config and tokenizer
#   files and int8.safetensors, each 2-D weight as per-row int8 plus its scale (the 88 MB folder is over the tool's
#   64 MiB; restored to float32 below, so the body differs from MiniLM's by that rounding).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/gguf-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p /tmp/minilm && cp .whl/minilm/*.json .whl/minilm/vocab.txt /tmp/minilm/
python3 - <<'PY'
from safetensors.torch import load_file, save_file
q = load_file(".whl/minilm/int8.safetensors")
out = {k[:-2]: (q[k].float() * q[k[:-2] + ".s"]).contiguous() for k in q if k.endswith(".q")}
out.update({k: v for k, v in q.items() if not k.endswith((".q", ".s"))})
save_file(out, "/tmp/minilm/model.safetensors")
print(len(out), "tensors restored")
PY
/usr/bin/time -f "%e s wall" python3 -m headswap.cli auto --data .whl/sms --budget 3m --model /tmp/minilm --out /tmp/auto 2>&1 | tail -40
cp /tmp/auto/results.json /tmp/auto/results.md $OUT/ 2>/dev/null
nvidia-smi --query-gpu=name,memory.used --format=csv
