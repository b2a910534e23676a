"""The training loop under `accelerate launch` with two CPU processes (gloo): both processes train, the
model is written once, and the result matches a single-process run of the same script.

Launch command. `accelerate launch --cpu --num_processes 2` does not start two processes: with --cpu,
accelerate's simple launcher runs one process (several CPU processes need mpirun and --mpirun_hostfile).
The torchrun-based launcher does start two, and ACCELERATE_USE_CPU=1 makes each of them pick the CPU and
the gloo backend:

    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 --num_machines 1 \\
        --mixed_precision no --dynamo_backend no tests/mp_train_script.py OUTDIR

Tolerance. The script splits the global batch of 32 into 16 per process, so both runs take the same 8
optimizer steps per epoch over the same texts in the same order, on the same learning-rate schedule; the
only difference is floating-point summation order (DDP averages two half-batch gradients where one
process sums the whole batch). Measured: weights differ by at most 2.5e-5 after 16 Adam steps, training
losses agree to 1e-7 relative. Asserted: weights within 1e-3, losses within 1e-5 relative, identical
validation scores, and test accuracy within one text (1/100).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

SCRIPT = Path(__file__).with_name("mp_train_script.py")


def _accelerate() -> str:
    exe = Path(sys.executable).with_name("accelerate")
    found = str(exe) if exe.exists() else shutil.which("accelerate")
    if not found:
        pytest.skip("the accelerate command is not installed")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]




def test_two_processes_train_once_and_match_one_process(tmp_path, one_thread, capsys):
    import mp_train_script

    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    cmd = [_accelerate(), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
           str(SCRIPT), str(tmp_path / "two"), "--epochs", "2", "--batch", "32"]
    launched = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        mp_train_script.main([str(tmp_path / "one"), "--epochs", "2", "--batch", "32"])   # meanwhile
        out, _ = launched.communicate(timeout=300)
    finally:
        if launched.poll() is None:
            launched.kill()
    assert launched.returncode == 0, out

    # Both processes trained, each on half of every global batch.
    ranks = [json.loads((tmp_path / "two" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["num_processes"] for r in ranks] == [2, 2] and ranks[0]["pid"] != ranks[1]["pid"]
    assert [(r["batch_size"], r["steps_per_epoch"]) for r in ranks] == [(16, [8, 8])] * 2
    single = json.loads((tmp_path / "one" / "rank0.json").read_text())
    assert (single["num_processes"], single["batch_size"], single["steps_per_epoch"]) == (1, 32, [8, 8])

    # Only the main process logged, and it saved the model once.
    lines = [line for line in out.splitlines() if line.startswith("[rank ")]
    assert lines and all(line.startswith("[rank 0]") for line in lines), out
    saved = [line for line in lines if "saved" in line]
    assert len(saved) == 1 and saved[0].startswith(f"[rank 0] rank 0 saved {tmp_path / 'two'}"), out
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["model.safetensors", "rank0.json",
                                                                    "rank1.json", "result.json"]

    # The same model as one process trained, up to summation order.
    one = json.loads((tmp_path / "one" / "result.json").read_text())
    two = json.loads((tmp_path / "two" / "result.json").read_text())
    assert two["num_processes"] == 2 and one["num_processes"] == 1
    assert one["n_scored"] == two["n_scored"] == 100                     # gather_for_metrics dropped padding
    assert [h["metrics"]["n"] for h in two["history"]] == [50, 50]
    assert [h["score"] for h in two["history"]] == [h["score"] for h in one["history"]]
    for h1, h2 in zip(one["history"], two["history"]):
        assert h2["train_loss"] == pytest.approx(h1["train_loss"], rel=1e-5)
    assert abs(two["accuracy"] - one["accuracy"]) <= 1 / 100
    w1 = load_file(str(tmp_path / "one" / "model.safetensors"))
    w2 = load_file(str(tmp_path / "two" / "model.safetensors"))
    assert w1.keys() == w2.keys() and any(k.startswith("body.") for k in w1)   # partial: a trained block too
    worst = max((w1[k] - w2[k]).abs().max().item() for k in w1)
    assert worst <= 1e-3, worst


def test_every_strategy_reaches_all_its_trainable_parameters(tmp_path, monkeypatch, one_thread):
    """Why fit() leaves DDP's find_unused_parameters off: a trainable parameter that gets no gradient would
    make multi-process training fail at its second step. One forward/backward per strategy and regime."""
    import torch.nn.functional as F
    from tiny_models import make_tiny_causal, make_tiny_encoder

    import headswap.classifier.estimator as api
    from headswap import TextClassifier
    from headswap.strategies import names
    STRATEGIES, NEEDS_CAUSAL = names(), names(needs_causal=True)

    models = {"encoder": str(make_tiny_encoder(tmp_path / "enc")),
              "causal": str(make_tiny_causal(tmp_path / "cau"))}
    unused: dict = {}

    class Probed(Exception):
        pass

    def probe(module, items, collate, cfg, **kw):
        batch = collate(items[:4])
        labels = batch.pop("labels")
        module.train()
        loss = (module(**batch, labels=labels) if getattr(module, "computes_own_loss", False)
                else F.cross_entropy(module(**batch), labels))
        loss.backward()
        unused[key] = [n for n, p in module.named_parameters() if p.requires_grad and p.grad is None]
        raise Probed

    monkeypatch.setattr(api, "fit", probe)
    texts = ["win cash now", "free entry txt win", "see you at noon", "ok on my way home"]
    labels = ["spam", "spam", "ham", "ham"]
    for strategy in STRATEGIES:
        for regime in ("auto", "head-only", "partial", "lora"):
            if (strategy == "generate-parse" and regime == "head-only") or \
                    (strategy == "static" and regime in ("partial", "lora")):   # refused: no blocks to adapt
                continue
            key = (strategy, regime)
            model = models["causal" if strategy in NEEDS_CAUSAL else "encoder"]
            with pytest.raises(Probed):
                TextClassifier(strategy=strategy, model=model, regime=regime, epochs=1, batch_size=4,
                               progress=False).fit(texts, labels)
    assert len(unused) == len(STRATEGIES) * 4 - 1 - 2 * ("static" in STRATEGIES)
    assert {k: v for k, v in unused.items() if v} == {}
