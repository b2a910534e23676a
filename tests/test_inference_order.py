"""compute_features and predict_logits run items in order of length and return rows in input order."""

import torch
from torch import nn

from headswap.nn.inference import compute_features, predict_logits


class Recorder(nn.Module):
    """Features and logits that depend on each row's own tokens only; records each batch's padded width."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))
        self.widths = []

    def features(self, input_ids, attention_mask):
        self.widths.append(input_ids.shape[1])
        ids = (input_ids * attention_mask).float()
        return torch.stack([ids.sum(1), attention_mask.sum(1).float()], 1) * self.w

    def forward(self, input_ids, attention_mask):
        return self.features(input_ids, attention_mask)


def collate(items):
    width = max(len(it["input_ids"]) for it in items)
    ids = torch.zeros(len(items), width, dtype=torch.long)
    mask = torch.zeros(len(items), width, dtype=torch.long)
    for r, it in enumerate(items):
        ids[r, :len(it["input_ids"])] = torch.tensor(it["input_ids"])
        mask[r, :len(it["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask}


# short and long texts alternate, as in a file read in its own order
ITEMS = [{"input_ids": [i + 1] * (2 if i % 2 else 40)} for i in range(8)]
EXPECTED = torch.tensor([[float(sum(it["input_ids"])), float(len(it["input_ids"]))] for it in ITEMS])


def test_features_come_back_in_input_order_from_batches_padded_to_their_own_length():
    model = Recorder()
    feats = compute_features(model, ITEMS, collate, batch_size=2)
    torch.testing.assert_close(feats, EXPECTED)
    # in file order every batch would pad to 40; in order of length half of them hold only short texts
    assert sorted(model.widths) == [2, 2, 40, 40]


def test_logits_and_features_agree_row_for_row():
    model = Recorder()
    torch.testing.assert_close(predict_logits(model, ITEMS, collate, batch_size=3), EXPECTED)
    torch.testing.assert_close(compute_features(model, ITEMS, collate, batch_size=3), EXPECTED)
