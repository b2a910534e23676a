import pytest
import torch

from headswap.nn.classifier import Classifier
from headswap.teach.demo import make_collate
from headswap.teach.fixture import fixture_split
from headswap.train.regimes import apply_regime, count_parameters
from headswap.teach.tiny import TinyConfig, TinyTransformer
from headswap.teach.tokenizer import ByteTokenizer
from headswap.train.loop import TrainConfig, fit, predict_logits


@pytest.fixture(scope="module")
def data():
    tr_x, tr_y, _, _ = fixture_split()
    return [(x, int(y == "spam")) for x, y in zip(tr_x[:128], tr_y[:128])]


def _trained(regime, data, last_n=1, epochs=2, seed=0):
    torch.manual_seed(0)
    body = TinyTransformer(TinyConfig())
    before = {k: v.clone() for k, v in body.state_dict().items()}
    model = apply_regime(Classifier(body, 64, 2), regime, last_n=last_n)
    fit(model, data, make_collate(ByteTokenizer()), TrainConfig(epochs=epochs, head_lr=1e-2, body_lr=1e-2,
        seed=seed, progress=False), log=None)
    after = body.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k].cpu())}   # fit may have moved it to a GPU
    return model, changed, before


def test_head_only_leaves_the_body_bit_identical(data):
    model, changed, _ = _trained("head-only", data)
    assert changed == set()
    assert count_parameters(model) == 64 * 2 + 2
    assert all(not p.requires_grad for p in model.body.parameters())


@pytest.mark.parametrize("last_n", [1, 2])
def test_partial_changes_only_the_last_blocks(data, last_n):
    _, changed, before = _trained("partial", data, last_n=last_n)
    allowed_prefixes = tuple(f"blocks.{i}." for i in range(2 - last_n, 2)) + ("ln_f.",)
    assert changed, "partial training changed nothing"
    assert all(k.startswith(allowed_prefixes) for k in changed), changed
    assert any(k.startswith(f"blocks.{2 - last_n}.") for k in changed)


def test_full_changes_every_part(data):
    _, changed, _ = _trained("full", data)
    for part in ("tok.", "pos.", "blocks.0.", "blocks.1.", "ln_f."):
        assert any(k.startswith(part) for k in changed), part


def test_partial_rejects_more_blocks_than_exist():
    with pytest.raises(ValueError, match="between 1 and 2"):
        apply_regime(Classifier(TinyTransformer(), 64, 2), "partial", last_n=3)


def test_same_seed_same_model(data):
    a, _, _ = _trained("full", data, seed=3)
    b, _, _ = _trained("full", data, seed=3)
    collate = make_collate(ByteTokenizer())
    torch.testing.assert_close(predict_logits(a, data, collate), predict_logits(b, data, collate), rtol=0, atol=0)


def test_lora_settings_take_their_defaults_and_values_from_the_settings():
    from headswap.settings import defaults
    from headswap.train.lora import LoraSettings

    d = defaults()
    assert LoraSettings().to_dict() == {"r": d["lora_r"], "alpha": d["lora_alpha"], "dropout": d["lora_dropout"],
                                        "targets": None, "last_n": None}
    params = {**d, "lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0}
    assert LoraSettings.from_params(params) == LoraSettings(4, 8, 0.0)
