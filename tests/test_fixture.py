from collections import Counter

from headswap.teach.fixture import fixture_split, sms_fixture
from headswap.teach.tokenizer import ByteTokenizer


def test_fixture_is_deterministic_and_balanced():
    texts, labels = sms_fixture()
    assert (texts, labels) == sms_fixture()
    assert sms_fixture(seed=1) != (texts, labels)
    assert len(texts) == 800 and Counter(labels) == {"spam": 400, "ham": 400}
    assert len(set(texts)) == 800


def test_messages_are_5_to_25_tokens():
    tok = ByteTokenizer(max_length=1000)
    lengths = [len(tok.encode(t)) for t in sms_fixture()[0]]
    assert min(lengths) >= 5 and max(lengths) <= 25


def test_split_is_stratified_80_20_and_disjoint():
    tr_x, tr_y, te_x, te_y = fixture_split()
    assert len(tr_x) == 640 and len(te_x) == 160
    assert Counter(te_y) == {"spam": 80, "ham": 80}
    assert not set(tr_x) & set(te_x)
    assert fixture_split() == (tr_x, tr_y, te_x, te_y)
