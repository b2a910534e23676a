"""Model directories saved by earlier code still load and predict the same probabilities and labels:
tests/fixtures/format1 (written before the package was restructured, by tests/fixtures/make_format1.py) and
tests/fixtures/format2 (written before the classifier became a package and the root's modules families, by
tests/fixtures/make_format2.py: every strategy, a reject option, multi-label, chunking, an ONNX int8 export,
TF-IDF and a blend)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from headswap import load_model

FIXTURES = Path(__file__).parent / "fixtures"
CASES = [(fmt, name) for fmt in ("format1", "format2")
         for name in sorted(json.loads((FIXTURES / fmt / "expected.json").read_text()))]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """Each fixture in a temporary folder, every saved config's base model pointed at the copied base (saved
    configs hold absolute paths to local base models)."""
    out = {}
    for fmt in ("format1", "format2"):
        root = tmp_path_factory.mktemp(fmt)
        shutil.copytree(FIXTURES / fmt, root, dirs_exist_ok=True)
        for cfg_file in root.rglob("headswap_config.json"):
            cfg = json.loads(cfg_file.read_text())
            ref = (cfg.get("base_model") or {}).get("ref")
            if ref and Path(ref).name in ("base-encoder", "base-causal"):
                cfg["base_model"]["ref"] = str(root / Path(ref).name)
                cfg_file.write_text(json.dumps(cfg))
        out[fmt] = root
    return out


@pytest.mark.parametrize("fmt,name", CASES)
def test_old_model_directory_predicts_the_same(copies, fmt, name):
    row = json.loads((FIXTURES / fmt / "expected.json").read_text())[name]
    model = load_model(copies[fmt] / name, progress=False)
    np.testing.assert_allclose(model.predict_proba(row["texts"]), np.array(row["proba"]), atol=1e-5, rtol=0)
    predicted = model.predict(row["texts"])
    as_text = [str(tuple(v)) if isinstance(v, (tuple, list)) else str(v) for v in predicted]
    assert as_text == row["predict"]


def test_format2_holds_every_strategy():
    from headswap import settings
    names = json.loads((FIXTURES / "format2" / "expected.json").read_text())
    assert {s for s in settings.STRATEGIES if not any(n.startswith(s) for n in names)} == set()
