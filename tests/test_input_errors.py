"""Input a careless or hostile user gives (a probe's findings): each is one line naming the file, line and column,
or the option and the place, with exit code 2 and no traceback. A JSON escape of half a surrogate pair, a command-
line text that is not UTF-8, a UTF-16 or UTF-32 file, an --out where nothing can be written; and the language-fit
check on a script written without spaces (Chinese), which pieces per word cannot judge."""

from __future__ import annotations

import errno
import json
import logging
import subprocess
import sys

import pytest
from cli_run import invoke
from tiny_models import make_tiny_encoder, make_tiny_wordpiece_encoder
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from headswap import TextClassifier
from headswap.saved.atomic import output_lock
from headswap.data.load import from_lists, load_dataset
from headswap.errors import DataError, HeadswapError
from headswap.text.language_fit import language_fit, warn_if_language_misfits

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home"] * 3
LABELS = ["spam", "spam", "ham", "ham"] * 3
SURROGATE = '{"text": "\\ud83dhi", "label": "ham"}'      # the JSON escape of a lone high surrogate


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("input-errors")
    enc = make_tiny_encoder(root / "enc")
    model = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0).fit(TEXTS, LABELS)
    return {"enc": enc, "model": model.save(root / "model")}


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


def _jsonl(path, extra: str, at: int = 3):
    lines = [json.dumps({"text": t, "label": y}) for t, y in zip(TEXTS, LABELS)]
    lines.insert(at - 1, extra)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _csv(path, encoding: str):
    path.write_bytes(("text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(TEXTS, LABELS))).encode(encoding))
    return path


# 1. unpaired surrogates

@pytest.mark.parametrize("command", ["train", "predict", "audit"])
def test_a_lone_surrogate_escape_in_jsonl_is_one_line_naming_file_line_and_column(world, tmp_path, command):
    data = _jsonl(tmp_path / "data.jsonl", SURROGATE)
    args = {"train": ["train", "--data", str(data), "--model", str(world["enc"]), "--epochs", "1", "--out",
                      str(tmp_path / "m"), "-q"],
            "predict": ["predict", "-q", "--model-dir", str(world["model"]), "--data", str(data)],
            "audit": ["audit", "-q", "--data", str(data), "--folds", "2", "--out", str(tmp_path / "a")]}[command]
    rc, out, err = invoke(args)
    line = _one_line(err)
    assert rc == 2 and out == ""
    assert f"{data}, line 3, column 'text': not valid Unicode (an unpaired surrogate \\ud83d at character 1" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl"]     # nothing written


def test_a_lone_surrogate_in_a_label_or_in_memory_is_refused_too(tmp_path):
    data = _jsonl(tmp_path / "d.jsonl", '{"text": "hi", "label": "h\\udc00m"}', at=5)
    with pytest.raises(DataError, match=r"d\.jsonl, line 5, column 'label': not valid Unicode \(an unpaired "
                                        r"surrogate \\udc00 at character 2"):
        load_dataset(data)
    multi = _jsonl(tmp_path / "m.jsonl", '{"text": "hi", "label": ["a", "\\ud800"]}', at=2)
    rc, _, err = invoke(["train", "--data", str(multi), "--multi-label", "--out", str(tmp_path / "m"), "-q"])
    assert rc == 2 and "not valid Unicode (an unpaired surrogate \\ud800" in _one_line(err)
    with pytest.raises(DataError, match=r"<memory>, index 1, column 'text': not valid Unicode"):
        from_lists(["ok", "a\ud83d"], ["a", "b"])


def test_command_line_texts_that_are_not_utf8_are_one_line(world):
    rc, out, err = invoke(["predict", "-q", "--model-dir", str(world["model"]), "ok", "ab\udcffc"])
    assert rc == 2 and out == ""
    assert _one_line(err) == ("headswap predict: error: text 2 on the command line is not UTF-8: byte 0xff at "
                              "character 3 (the shell passed text in another encoding); pass UTF-8 text, or put the "
                              "texts in a UTF-8 file and give it as --data")
    # as a shell passes it: raw bytes in argv, which Python decodes with surrogateescape
    r = subprocess.run([sys.executable, "-m", "headswap.cli", "predict", "-q", "--model-dir", str(world["model"]),
                        b"\xe9t\xe9"], capture_output=True, text=True)
    assert r.returncode == 2 and "text 1 on the command line is not UTF-8: byte 0xe9 at character 1" in \
        _one_line(r.stderr)


@pytest.mark.parametrize("text", ["", "  \t"])
def test_an_empty_command_line_text_is_refused_as_a_files_and_serves_are(world, text):
    """`predict ""` classified the empty text, where a file's empty text is refused and serve answers 422."""
    rc, out, err = invoke(["predict", "-q", "--model-dir", str(world["model"]), "ok", text])
    assert rc == 2 and out == ""
    assert _one_line(err) == ("headswap predict: error: text 2 on the command line is empty or only whitespace; "
                              "give the text to classify")


# 2. UTF-16 and UTF-32 files

@pytest.mark.parametrize("encoding, name", [("utf-16", "UTF-16"), ("utf-16-be", "UTF-16"), ("utf-32", "UTF-32")])
def test_a_utf16_or_utf32_file_is_named_as_such_with_the_iconv_line(world, tmp_path, encoding, name):
    data = tmp_path / "data.csv"
    raw = ("\ufeff" if encoding == "utf-16-be" else "") + "text,label\n" + "".join(f"{t},{y}\n" for t, y in
                                                                                   zip(TEXTS, LABELS))
    data.write_bytes(raw.encode(encoding))     # "utf-16"/"utf-32" write a BOM of their own (little-endian here)
    assert data.read_bytes()[:2] in (b"\xff\xfe", b"\xfe\xff")
    expected = (f"{data}: is {name}, not UTF-8 (it starts with a {name} byte-order mark); convert it: iconv -f {name} "
                f"-t UTF-8 {data} > {tmp_path / 'data.utf8.csv'}")
    rc, _, err = invoke(["train", "--data", str(data), "--model", str(world["enc"]), "--epochs", "1", "--out",
                         str(tmp_path / "m"), "-q"])
    assert rc == 2 and _one_line(err) == f"headswap train: error: {expected}"
    rc, out, err = invoke(["predict", "-q", "--model-dir", str(world["model"]), "--data", str(data)])
    assert rc == 2 and out == "" and _one_line(err) == f"headswap predict: error: {expected}"
    assert "latin1" not in err


def test_a_utf8_bom_still_reads(tmp_path):
    data = tmp_path / "bom.csv"
    data.write_bytes(b"\xef\xbb\xbf" + _csv(tmp_path / "plain.csv", "utf-8").read_bytes())
    assert load_dataset(data).texts == TEXTS


# 3. language fit on a script written without spaces

CHINESE = ["今天天气很好，我们一起去公园散步吧。", "这家餐厅的菜太难吃了，服务也很差，再也不来了！",
           "请问明天上午的会议改到几点了？", "我非常喜欢这部电影，演员的表演特别精彩。",
           "快递已经三天了还没有送到，客服也不回复消息。", "周末我打算在家看书，顺便整理一下房间。"] * 4


def _chinese_wordpiece() -> PreTrainedTokenizerFast:
    """A tiny BERT-style tokenizer that knows every Chinese character of the texts (one piece each, as BERT's
    multilingual vocabularies read Chinese): several pieces per 'word' (a clause), yet a full fit."""
    chars = sorted({c for t in CHINESE for c in t})
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *chars])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(handle_chinese_chars=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]")


def _misfit_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
            and "does not fit these texts' language" in r.getMessage()]


def test_chinese_through_a_vocabulary_that_has_it_fits(fresh_warnings, caplog):
    tok = _chinese_wordpiece()
    fit = language_fit(tok, CHINESE)
    assert fit.pieces_per_word > 5 and fit.unknown_rate == 0       # what the old per-word rule warned on
    assert fit.unspaced and fit.pieces_per_character == pytest.approx(1.0) and fit.fits
    with caplog.at_level(logging.WARNING):
        warn_if_language_misfits(tok, CHINESE, "zh-vocab")
    assert _misfit_lines(caplog) == []


def test_chinese_through_vocabularies_without_it_still_warns(fresh_warnings, tmp_path, caplog):
    unknown = AutoTokenizer.from_pretrained(make_tiny_wordpiece_encoder(tmp_path / "wp"))     # [UNK] per character
    bytes_ = AutoTokenizer.from_pretrained(make_tiny_encoder(tmp_path / "bpe"))    # English byte-level BPE: bytes
    assert language_fit(unknown, CHINESE).unknown_rate > 0.9
    assert language_fit(bytes_, CHINESE).pieces_per_character > 2
    with caplog.at_level(logging.WARNING):
        warn_if_language_misfits(unknown, CHINESE, "wordpiece")
        warn_if_language_misfits(bytes_, CHINESE, "bpe")
    first, second = _misfit_lines(caplog)
    assert "wordpiece's vocabulary does not fit" in first and "100.0% unknown tokens" in first
    assert "bpe's vocabulary does not fit" in second and "pieces per character (a script written without spaces" \
        in second and "at most about 1 piece per character" in second


# 4. an --out where nothing can be written

def test_out_under_proc_is_an_unwritable_place_not_another_process(world, tmp_path):
    data = _csv(tmp_path / "d.csv", "utf-8")
    rc, _, err = invoke(["train", "--data", str(data), "--model", str(world["enc"]), "--epochs", "1", "--out",
                         "/proc/headswap-test-out", "-q"])
    line = _one_line(err)
    assert rc == 2 and "--out /proc/headswap-test-out: cannot write in /proc (" in line
    assert "another headswap process" not in line


def test_a_read_only_folder_is_said_so_and_a_held_lock_is_still_another_process(tmp_path, monkeypatch):
    import headswap.saved.atomic

    def refuse(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")
    with monkeypatch.context() as m:
        m.setattr(headswap.saved.atomic.tempfile, "mkdtemp", refuse)    # check_writable's probe
        with pytest.raises(HeadswapError) as e:
            with output_lock(tmp_path / "ro" / "out"):
                pass
    assert str(e.value) == f"--out {tmp_path / 'ro' / 'out'}: cannot write in {tmp_path / 'ro'} (Permission denied)"
    assert not (tmp_path / "ro").exists()       # the folder made for it is removed again
    with output_lock(tmp_path / "out"):
        with pytest.raises(HeadswapError, match="is being written by another headswap process"):
            with output_lock(tmp_path / "out"):
                pass
