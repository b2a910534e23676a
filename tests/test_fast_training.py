"""The training speed-ups of issue 11: BitsDropout on the LoRA branches and length-grouped batches.

Both change which random numbers training draws, not what it optimises, so they are checked against the
distribution they must have (dropout) and the order they must keep (sampler); mid-epoch resume is in
test_resume.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from tiny_models import make_tiny_causal
from torch import nn

from headswap import TextClassifier
from headswap.errors import ConfigError
from headswap.classifier.fitted import Fitted
from headswap.nn.dropout import BitsDropout
from headswap.train.loop import EpochShuffle, epoch_seed

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- BitsDropout ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.05, 0.1, 0.5])
def test_bits_dropout_drops_each_element_with_probability_p_and_rescales_the_rest(p):
    torch.manual_seed(0)
    n = 1 << 22
    out = BitsDropout(p).train()(torch.ones(n))
    levels = round(p * 65536)
    dropped = out == 0
    # Every lane of the 64-bit draws (element i uses bits 16*(i%4)..) drops at rate p: a lane reading a
    # bit that is always 0 (torch's random_() leaves the sign bit clear) would drop at 2p or 0.
    sigma = math.sqrt(p * (1 - p) / (n / 4))
    for lane in range(4):
        assert abs(dropped[lane::4].float().mean().item() - p) < 5 * sigma, lane
    assert torch.all(out[~dropped] == 65536 / (65536 - levels))
    assert abs(out.mean().item() - 1) < 5 * math.sqrt(p / (1 - p) / n)     # unbiased


def test_bits_dropout_masks_neighbours_independently():
    torch.manual_seed(1)
    d = (BitsDropout(0.3).train()(torch.ones(1 << 20)) == 0).float()
    both = (d[:-1] * d[1:]).mean().item()
    assert abs(both - 0.09) < 0.003            # P(i and i+1 dropped) = p^2 when independent


def test_bits_dropout_is_identity_in_eval_mode_or_at_p0_and_reproducible_under_a_seed():
    x = torch.randn(3, 5, 7)
    assert BitsDropout(0.2).eval()(x) is x
    assert BitsDropout(0.0).train()(x) is x
    drop = BitsDropout(0.2).train()
    torch.manual_seed(3)
    a = drop(x)
    torch.manual_seed(3)
    assert torch.equal(a, drop(x))
    assert not torch.equal(a, drop(x))
    with pytest.raises(ValueError, match="dropout probability"):
        BitsDropout(1.0)


def test_bits_dropout_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(2)
    x = torch.randn(4, 33, requires_grad=True)     # a size not divisible by 4: the last draw is partly used
    out = BitsDropout(0.25).train()(x)
    out.sum().backward()
    keep = out != 0
    assert torch.equal(x.grad, keep.float() * (65536 / (65536 - 16384)))


def test_lora_branches_get_bits_dropout_with_the_configured_p(tmp_path):
    model = make_tiny_causal(tmp_path / "cau")
    clf = TextClassifier(strategy="slm-logits", model=str(model), regime="lora", lora_dropout=0.1, epochs=1,
                         progress=False)
    clf.fitted_ = Fitted.for_labels(["a", "b"])
    clf._build()
    drops = [m for name, m in clf.module_.named_modules() if ".lora_dropout." in name + "."]
    drops = [d for m in drops for d in m.children()] if drops and isinstance(drops[0], nn.ModuleDict) else drops
    assert drops and all(isinstance(d, BitsDropout) and d.p == 0.1 for d in drops)
    assert not any(isinstance(m, nn.Dropout) for name, m in clf.module_.named_modules() if "lora" in name)


# ---- group_by_length -------------------------------------------------------------------------------------------


def _padding(order, lengths, b):
    batches = [order[s:s + b] for s in range(0, len(order), b)]
    return sum(max(lengths[i] for i in x) * len(x) for x in batches) / sum(lengths)


def test_grouped_order_is_a_permutation_of_similar_length_batches_new_each_epoch():
    g = torch.Generator().manual_seed(0)
    n, b = 1003, 16
    lengths = (torch.rand(n, generator=g) ** 3 * 120 + 4).long().tolist()   # long-tailed, like real texts
    grouped = EpochShuffle(n, seed=7, lengths=lengths, batch_size=b)
    first = grouped.order()
    assert sorted(first) == list(range(n))
    assert grouped.order() == first                                  # a pure function of (seed, epoch)
    grouped.epoch = 2
    second = grouped.order()
    assert sorted(second) == list(range(n)) and second != first
    assert [first[s:s + b] for s in range(0, n, b)] != [second[s:s + b] for s in range(0, n, b)]
    plain = EpochShuffle(n, seed=7).order()
    assert _padding(first, lengths, b) < 1.1 < 1.5 < _padding(plain, lengths, b)
    # The short batch (1003 = 62 x 16 + 11) comes last, so the DataLoader's batches are exactly these: the
    # shortest texts of the last mega-batch (the permutation's last 1003 - 800 indices).
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(epoch_seed(7, 1))).tolist()
    last_mega, tail = perm[50 * b:], first[n - n % b:]
    assert len(tail) == n % b and set(tail) <= set(last_mega)
    assert max(lengths[i] for i in tail) <= min(lengths[i] for i in set(last_mega) - set(tail))


def test_grouped_batches_are_shuffled_not_sorted_and_start_skips_the_head():
    n, b = 800, 8
    lengths = list(range(n))
    s = EpochShuffle(n, seed=1, lengths=lengths, batch_size=b)
    order = s.order()
    maxima = [max(lengths[i] for i in order[k:k + b]) for k in range(0, n, b)]
    assert maxima != sorted(maxima) and maxima != sorted(maxima, reverse=True)
    s.start = 3 * b
    assert list(s) == order[3 * b:] and len(s) == n - 3 * b


def test_group_by_length_and_checkpoint_every_are_settings_with_checks():
    with pytest.raises(ConfigError, match="group_by_length must be True or False"):
        TextClassifier(group_by_length="yes").resolved_params()
    with pytest.raises(ConfigError, match="checkpoint_every"):
        TextClassifier(checkpoint_every=-1).resolved_params()
