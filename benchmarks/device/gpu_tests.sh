#!/usr/bin/env bash
# headswap's CUDA path on a lent GPU machine: the training, resume, cache, export and auto tests on tiny models
# (no weights needed), 8 at a time. Needs the gguf wheel in .whl/ (benchmarks/device/gpu_auto.sh says how).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi -L
python3 -c "import torch, transformers, peft, accelerate, sklearn; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__, 'peft', peft.__version__, 'accelerate', accelerate.__version__, 'sklearn', sklearn.__version__)"
python3 - <<'PY'
import torch, headswap
from accelerate import PartialState
print("accelerate device:", PartialState().device)
PY
timeout 400 python3 -m pytest -q -ra -n 8 -p no:cacheprovider -o addopts="" -m "not slow" --timeout 300 \
  tests/test_regimes.py tests/test_fast_training.py tests/test_resume.py tests/test_causal_cache.py \
  tests/test_prefix_cache.py tests/test_warm_start.py tests/test_init_from.py tests/test_pooling.py \
  tests/test_saved_format.py tests/test_auto_budget.py tests/test_arms.py tests/test_class_weights.py \
  tests/test_calibration.py tests/test_multi_label.py tests/test_strategies.py tests/test_long_text.py \
  tests/test_export.py tests/test_training_speed.py 2>&1 | tee $OUT/pytest.log | tail -80
