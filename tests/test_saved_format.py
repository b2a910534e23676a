"""Model directories saved by headswap before the package was restructured still load and predict the
same probabilities (tests/fixtures/format1, written by tests/fixtures/make_format1.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from headswap import TextClassifier

FIXTURE = Path(__file__).parent / "fixtures" / "format1"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def copied(tmp_path_factory):
    """The fixture in a temporary folder, each config's base model pointed at the copied base (saved
    configs hold absolute paths to local base models)."""
    root = tmp_path_factory.mktemp("format1")
    shutil.copytree(FIXTURE, root, dirs_exist_ok=True)
    for name, row in EXPECTED.items():
        cfg_file = root / name / "headswap_config.json"
        cfg = json.loads(cfg_file.read_text())
        cfg["base_model"]["ref"] = str(root / f"base-{row['kind']}")
        cfg_file.write_text(json.dumps(cfg))
    return root


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_old_model_directory_predicts_the_same(copied, name):
    row = EXPECTED[name]
    clf = TextClassifier.load(copied / name, progress=False)
    np.testing.assert_allclose(clf.predict_proba(row["texts"]), np.array(row["proba"]), atol=1e-5, rtol=0)
    assert [str(v) for v in clf.predict(row["texts"])] == row["predict"]
