import pytest

from headswap.teach.tokenizer import ByteTokenizer


@pytest.mark.parametrize("text", ["hello", "Free £500 prize!", "naïve café 😀", " spaces kept ", ""])
def test_round_trip(text):
    tok = ByteTokenizer(max_length=256)
    ids = tok.encode(text)
    assert all(0 <= i < 256 for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode(tok.encode(text, add_cls=True, add_eos=True)) == text


def test_specials_are_outside_byte_range_and_vocab_is_260():
    tok = ByteTokenizer()
    specials = {tok.pad_id, tok.cls_id, tok.eos_id, tok.unk_id}
    assert len(specials) == 4 and min(specials) == 256 and max(specials) == 259
    assert tok.vocab_size == 260


def test_truncation_and_padding_sides():
    right = ByteTokenizer(max_length=4)
    enc = right(["abcdefgh", "ab"])
    assert enc.truncated == 1
    assert enc.input_ids.tolist() == [[97, 98, 99, 100], [97, 98, 256, 256]]
    assert enc.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    left = ByteTokenizer(max_length=4, padding_side="left")(["ab"])
    assert left.input_ids.tolist() == [[97, 98]]  # width is the longest row, not max_length
    left2 = ByteTokenizer(max_length=4, padding_side="left")(["abc", "a"])
    assert left2.input_ids.tolist() == [[97, 98, 99], [256, 256, 97]]
    assert left2.attention_mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_cls_is_prepended_and_counts_towards_max_length():
    tok = ByteTokenizer(max_length=3, add_cls=True)
    assert tok.encode("abc") == [tok.cls_id, 97, 98]
