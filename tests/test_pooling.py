import pytest
import torch

from headswap.nn.pooling import POOLINGS, make_pool
from headswap.teach.tiny import TinyConfig, TinyTransformer
from headswap.teach.tokenizer import ByteTokenizer

TEXTS = ["win cash now", "see you at 5", "ok", "call me back tonight please"]


def _pooled(pooling, causal, padding_side, extra_pads):
    torch.manual_seed(0)
    cfg = TinyConfig(max_len=64)
    body = TinyTransformer(cfg, causal=causal).eval()
    pool = make_pool(pooling, cfg.hidden)
    if pooling == "attention":
        torch.nn.init.normal_(pool.query)  # a zero query would weight tokens uniformly
    enc = ByteTokenizer(max_length=64, add_cls=pooling == "cls", padding_side=padding_side)(TEXTS)
    ids, mask = enc.input_ids, enc.attention_mask
    pad = torch.full((len(TEXTS), extra_pads), ByteTokenizer.pad_id)
    zeros = torch.zeros_like(pad)
    if padding_side == "right":
        ids, mask = torch.cat([ids, pad], 1), torch.cat([mask, zeros], 1)
    else:
        ids, mask = torch.cat([pad, ids], 1), torch.cat([zeros, mask], 1)
    with torch.no_grad():
        return pool(body(ids, mask), mask)


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("causal", [True, False])
def test_pad_tokens_never_change_the_pooled_vector(pooling, causal):
    ref = _pooled(pooling, causal, "right", 0)
    assert torch.isfinite(ref).all()
    for side in ("right", "left"):
        for extra in (0, 7):
            torch.testing.assert_close(_pooled(pooling, causal, side, extra), ref, atol=1e-5, rtol=1e-5)


def test_last_and_cls_pick_the_right_positions_under_both_paddings():
    hidden = torch.arange(2 * 5, dtype=torch.float).view(2, 5, 1)
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert make_pool("last", 1)(hidden, right).flatten().tolist() == [2.0, 9.0]
    assert make_pool("last", 1)(hidden, left).flatten().tolist() == [4.0, 9.0]
    assert make_pool("cls", 1)(hidden, right).flatten().tolist() == [0.0, 5.0]
    assert make_pool("cls", 1)(hidden, left).flatten().tolist() == [2.0, 5.0]


def test_mean_and_max_ignore_pad_values():
    hidden = torch.tensor([[[1.0], [3.0], [100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert make_pool("mean", 1)(hidden, mask).item() == 2.0
    assert make_pool("max", 1)(hidden, mask).item() == 3.0


def test_unknown_pooling_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown pooling 'flatten'"):
        make_pool("flatten", 8)
