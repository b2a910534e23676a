"""ONNX Runtime's telemetry, off. Its native library (1.32 on Linux included) queues usage events in
~/.cache/Microsoft/DeveloperTools and, seconds after it loads, resolves mobile.events.data.microsoft.com to upload
them: a model run offline would still look up a host. headswap never asks for that."""

from __future__ import annotations

import os
import sys

ENV = "ORT_DISABLE_TELEMETRY"


def disable_onnxruntime_telemetry() -> None:
    """Turn it off for this process and the processes it starts (Ray workers). The variable is read once, when
    the library loads: `onnxruntime.disable_telemetry_events()` alone still lets the uploader resolve the host
    (measured with 1.32), so this runs when headswap is imported, before anything can load onnxruntime."""
    os.environ[ENV] = "1"
    ort = sys.modules.get("onnxruntime")
    if ort is not None and hasattr(ort, "disable_telemetry_events"):   # loaded before headswap was: do what is left
        ort.disable_telemetry_events()
