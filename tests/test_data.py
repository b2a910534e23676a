"""Tests for headswap.data: loading, validation errors, splits and label descriptions."""

from __future__ import annotations

import csv
import json
import logging
from collections import Counter
from pathlib import Path

import pytest

from headswap.data.load import (
    LabelledData,
    check_eval_labels,
    check_training_data,
    from_lists,
    load_dataset,
    load_descriptions,
    load_texts,
)
from headswap.data.sampling import stratified_split
from headswap.data.splits import split_files
from headswap.errors import DataError, HeadswapError

# /work/main/tests -> /work/shared/data locally; in CI the repo clone has shared/ beside it.
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def write_csv(path: Path, rows: list[list[str]], delimiter: str = ",") -> Path:
    with open(path, "w", encoding="utf-8", newline="") as f:
        csv.writer(f, delimiter=delimiter).writerows(rows)
    return path


def error(fn, *args, **kwargs) -> str:
    with pytest.raises(DataError) as info:
        fn(*args, **kwargs)
    return str(info.value)


# --------------------------------------------------------------------------------------------------------------
# Round trips


TRICKY = [
    "plain",
    "a, comma",
    'a "quoted" word',
    "line one\nline two",
    "  leading and trailing spaces  ",
    "&lt;html entity&gt; &amp; £ ü 😀",
    "windows\r\nnewline",
    "tab\tinside",
]


@pytest.mark.parametrize("suffix,delimiter", [(".csv", ","), (".tsv", "\t"), (".tab", "\t")])
def test_table_round_trip_custom_columns(tmp_path, suffix, delimiter):
    labels = ["pos", "neg"] * 4
    rows = [["id", "sentence", "category"]] + [[str(i), t, y] for i, (t, y) in enumerate(zip(TRICKY, labels))]
    path = write_csv(tmp_path / f"data{suffix}", rows, delimiter)
    data = load_dataset(path, text_column="sentence", label_column="category")
    assert data.texts == TRICKY
    assert data.labels == labels
    assert data.source == str(path)
    assert len(data) == len(TRICKY)
    assert data.label_names() == ["neg", "pos"]


def test_csv_row_numbers_are_start_lines(tmp_path):
    path = write(tmp_path / "d.csv", 'text,label\na,x\n"two\nlines",y\n"three\n\nlines",x\nb,y\n')
    data = load_dataset(path)
    assert data.texts == ["a", "two\nlines", "three\n\nlines", "b"]
    assert data.rows == [2, 3, 5, 8]
    assert data.where(2) == f"{path}, line 5"


def test_csv_crlf_and_bom(tmp_path):
    path = write(tmp_path / "d.csv", b'\xef\xbb\xbftext,label\r\n"a\r\nb",x\r\nc ,y\r\n')
    data = load_dataset(path)
    assert data.texts == ["a\r\nb", "c "]
    assert data.labels == ["x", "y"]
    assert data.rows == [2, 4]


def test_csv_blank_lines_skipped_and_logged(tmp_path, caplog):
    path = write(tmp_path / "d.csv", "text,label\n\na,x\n\nb,y\n\n")
    with caplog.at_level(logging.INFO, logger="headswap.data.load"):
        data = load_dataset(path)
    assert data.texts == ["a", "b"]
    assert data.rows == [3, 5]
    assert "skipped 3 blank" in caplog.text


def test_jsonl_round_trip_custom_columns(tmp_path, caplog):
    records = [{"body": t, "y": y} for t, y in zip(TRICKY, ["a", "b"] * 4)]
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    lines.insert(2, "")  # a blank line is skipped, and later line numbers still count it
    path = write(tmp_path / "d.jsonl", "\n".join(lines) + "\n")
    with caplog.at_level(logging.INFO, logger="headswap.data.load"):
        data = load_dataset(path, text_column="body", label_column="y")
    assert data.texts == TRICKY
    assert data.labels == ["a", "b"] * 4
    assert data.rows == [1, 2, 4, 5, 6, 7, 8, 9]
    assert "skipped 1 blank" in caplog.text


def test_jsonl_integer_labels_become_strings(tmp_path):
    path = write(tmp_path / "d.ndjson", '{"text": "a", "label": 0}\n{"text": "b", "label": 1}\n')
    assert load_dataset(path).labels == ["0", "1"]


def test_jsonl_text_with_line_separator_is_one_record(tmp_path):
    # U+2028 is legal unescaped inside a JSON string; it must not split the line.
    path = write(tmp_path / "d.jsonl", '{"text": "a\u2028b", "label": "x"}\n')
    assert load_dataset(path).texts == ["a\u2028b"]


def test_explicit_format_overrides_suffix(tmp_path):
    path = write(tmp_path / "d.txt", "text\tlabel\na b\tx\n")
    assert load_dataset(path, format="tsv").texts == ["a b"]
    assert load_dataset(path, format="TSV").labels == ["x"]


def test_txt_without_format_asks_for_it(tmp_path):
    path = write(tmp_path / "d.txt", "text,label\na,x\n")
    msg = error(load_dataset, path)
    assert "d.txt" in msg and "format=" in msg
    assert "rename it .csv, .tsv or .jsonl" in msg      # what a command-line user can do


def test_unknown_suffix_and_unknown_format(tmp_path):
    path = write(tmp_path / "d.xlsx", "x")
    assert "d.xlsx" in error(load_dataset, path)
    msg = error(load_dataset, tmp_path / "d.csv", format="xlsx")
    assert "unknown format 'xlsx'" in msg and "'parquet'" in msg      # the formats it does read


# --------------------------------------------------------------------------------------------------------------
# Unlabelled input


def test_require_labels_false_without_label_column(tmp_path):
    path = write(tmp_path / "d.csv", "text\nhello\nworld\n")
    data = load_dataset(path, require_labels=False)
    assert data.texts == ["hello", "world"]
    assert data.labels == []
    assert "'label'" in error(load_dataset, path)


def test_require_labels_false_still_checks_present_labels(tmp_path):
    path = write(tmp_path / "d.csv", "text,label\nhello,x\nworld,\n")
    msg = error(load_dataset, path, require_labels=False)
    assert "d.csv" in msg and "line 3" in msg and "'label'" in msg


def test_load_texts_ignores_labels(tmp_path):
    path = write(tmp_path / "d.csv", "label,text\n,hello\nspam,world\n")
    data = load_texts(path)
    assert data.texts == ["hello", "world"]
    assert data.labels == []
    jsonl = write(tmp_path / "d.jsonl", '{"text": "a"}\n{"text": "b", "label": null}\n')
    assert load_texts(jsonl).texts == ["a", "b"]


def test_jsonl_unlabelled_and_partly_labelled(tmp_path):
    none = write(tmp_path / "none.jsonl", '{"text": "a"}\n{"text": "b"}\n')
    assert load_dataset(none, require_labels=False).labels == []
    partly = write(tmp_path / "partly.jsonl", '{"text": "a", "label": "x"}\n{"text": "b"}\n')
    msg = error(load_dataset, partly, require_labels=False)
    assert "partly.jsonl" in msg and "line 2" in msg and "'label'" in msg
    msg = error(load_dataset, partly)
    assert "partly.jsonl" in msg and "line 2" in msg and "'label'" in msg


# --------------------------------------------------------------------------------------------------------------
# Errors


def test_file_not_found(tmp_path):
    msg = error(load_dataset, tmp_path / "missing.csv")
    assert "missing.csv" in msg and "not found" in msg


def test_directory(tmp_path):
    (tmp_path / "dir.csv").mkdir()
    assert "dir.csv" in error(load_dataset, tmp_path / "dir.csv")


@pytest.mark.parametrize("name,content", [("e.csv", ""), ("e.csv", "\n\n"), ("e.jsonl", ""), ("e.jsonl", "\n \n")])
def test_empty_file(tmp_path, name, content):
    msg = error(load_dataset, write(tmp_path / name, content))
    assert name in msg and "empty" in msg


def test_header_only(tmp_path):
    msg = error(load_dataset, write(tmp_path / "h.csv", "text,label\n"))
    assert "h.csv" in msg and "no data rows" in msg


def test_missing_text_column_lists_columns(tmp_path):
    msg = error(load_dataset, write(tmp_path / "m.csv", "sms,label\nhi,x\n"))
    assert "m.csv" in msg and "'text'" in msg and "'sms'" in msg and "'label'" in msg


def test_missing_label_column_lists_columns(tmp_path):
    msg = error(load_dataset, write(tmp_path / "m.tsv", "text\tclass\nhi\tx\n"))
    assert "m.tsv" in msg and "'label'" in msg and "'class'" in msg


def test_missing_column_hints_at_spaces(tmp_path):
    msg = error(load_dataset, write(tmp_path / "m.csv", "text, label\nhi,x\n"))
    assert "' label'" in msg and "did you mean" in msg


def test_missing_column_jsonl(tmp_path):
    path = write(tmp_path / "m.jsonl", '{"text": "a", "label": "x"}\n{"txt": "b", "label": "y"}\n')
    msg = error(load_dataset, path)
    assert "m.jsonl" in msg and "line 2" in msg and "'text'" in msg and "'txt'" in msg


def test_duplicate_column_name(tmp_path):
    msg = error(load_dataset, write(tmp_path / "d.csv", "text,text,label\na,b,x\n"))
    assert "d.csv" in msg and "'text'" in msg


@pytest.mark.parametrize("text", ["", "   ", "\t", "\n"])
def test_empty_text_csv(tmp_path, text):
    path = write_csv(tmp_path / "e.csv", [["label", "review"], ["x", "fine"], ["y", text]])
    msg = error(load_dataset, path, text_column="review")
    assert "e.csv" in msg and "line 3" in msg and "'review'" in msg and "empty" in msg


def test_empty_label_csv(tmp_path):
    path = write(tmp_path / "e.csv", "text,label\na,x\nb,x\nc,  \n")
    msg = error(load_dataset, path)
    assert "e.csv" in msg and "line 4" in msg and "'label'" in msg and "empty" in msg


@pytest.mark.parametrize("value,type_name", [("null", "NoneType"), ("3", "int"), ('["a"]', "list"), ('""', None)])
def test_bad_text_jsonl(tmp_path, value, type_name):
    path = write(tmp_path / "b.jsonl", '{"text": "ok", "label": "x"}\n\n{"text": %s, "label": "x"}\n' % value)
    msg = error(load_dataset, path)
    assert "b.jsonl" in msg and "line 3" in msg and "'text'" in msg
    if type_name:
        assert type_name in msg


@pytest.mark.parametrize("value", ["null", '""', "true", "1.5"])
def test_bad_label_jsonl(tmp_path, value):
    path = write(tmp_path / "b.jsonl", '{"text": "ok", "label": "x"}\n{"text": "t", "label": %s}\n' % value)
    msg = error(load_dataset, path)
    assert "b.jsonl" in msg and "line 2" in msg and "'label'" in msg


def test_a_list_label_is_a_multi_label_row_that_single_label_training_refuses(tmp_path):
    from headswap.data.load import check_training_data
    path = write(tmp_path / "b.jsonl", '{"text": "ok", "label": "x"}\n{"text": "t", "label": ["x", "y"]}\n')
    data = load_dataset(path)
    assert data.labels == ["x", ("x", "y")]
    msg = error(check_training_data, data)
    assert "b.jsonl, line 2: the label is a list, which is multi-label data" in msg


def test_malformed_json_line(tmp_path):
    path = write(tmp_path / "b.jsonl", '{"text": "ok", "label": "x"}\n{"text": "t", "label": "x"\n')
    msg = error(load_dataset, path)
    assert "b.jsonl" in msg and "line 2" in msg and "JSON" in msg


def test_json_line_not_an_object(tmp_path):
    msg = error(load_dataset, write(tmp_path / "b.jsonl", '["text", "label"]\n'))
    assert "b.jsonl" in msg and "line 1" in msg and "object" in msg


@pytest.mark.parametrize("row,found", [("a,x,extra", 3), ("only-text", 1)])
def test_wrong_field_count(tmp_path, row, found):
    path = write(tmp_path / "w.csv", f'text,label\n"multi\nline",x\n{row}\n')
    msg = error(load_dataset, path)
    assert "w.csv" in msg and "line 4" in msg and f"found {found}" in msg


def test_unterminated_quote(tmp_path):
    path = write(tmp_path / "q.csv", 'text,label\na,x\n"never closed,y\nb,x\nc,y\n')
    msg = error(load_dataset, path)
    assert "q.csv" in msg and "line 3" in msg


def test_stray_quote_after_quoted_field(tmp_path):
    # Non-strict csv would silently turn '"x" y' into 'x y'.
    path = write(tmp_path / "q.csv", 'text,label\na,x\n"x" y,z\n')
    msg = error(load_dataset, path)
    assert "q.csv" in msg and "line 3" in msg


def test_undecodable_bytes(tmp_path):
    content = "text,label\nfine,x\n".encode() + b"caf\xe9 latin-1,y\n"
    path = write(tmp_path / "l1.csv", content)
    msg = error(load_dataset, path)
    offset = content.index(b"\xe9")
    assert "l1.csv" in msg and "line 3" in msg and f"byte offset {offset}" in msg and "0xe9" in msg


def test_undecodable_bytes_offset_counts_bom(tmp_path):
    content = b"\xef\xbb\xbf" + b'{"text": "a", "label": "x"}\n{"text": "\xff", "label": "x"}\n'
    path = write(tmp_path / "bad.jsonl", content)
    msg = error(load_dataset, path)
    offset = content.index(b"\xff")
    assert "bad.jsonl" in msg and "line 2" in msg and f"byte offset {offset}" in msg


def test_errors_are_headswap_and_value_errors(tmp_path):
    with pytest.raises(HeadswapError):
        load_dataset(tmp_path / "nope.csv")
    with pytest.raises(ValueError):
        load_dataset(tmp_path / "nope.csv")


def test_same_text_and_label_column(tmp_path):
    path = write(tmp_path / "d.csv", "text,label\na,x\n")
    assert "'text'" in error(load_dataset, path, label_column="text")


# --------------------------------------------------------------------------------------------------------------
# from_lists


def test_from_lists_ok():
    data = from_lists(["a ", " b"], ["x", 1])
    assert data.texts == ["a ", " b"]
    assert data.labels == ["x", "1"]
    assert data.source == "<memory>"
    assert data.rows == [1, 2]
    assert data.where(1) == "<memory>, item 2"
    assert from_lists(["a"], None).labels == []


@pytest.mark.parametrize("texts", [["a", None], ["a", 3], ["a", "  "], ["a", ["b"]]])
def test_from_lists_bad_text_names_index(texts):
    msg = error(from_lists, texts, ["x", "y"], source="req")
    assert "req" in msg and "index 1" in msg


def test_from_lists_other_errors():
    assert "index 1" in error(from_lists, ["a", "b"], ["x", ""])
    assert "2 texts but 1 labels" in error(from_lists, ["a", "b"], ["x"])
    assert "no texts" in error(from_lists, [], [])
    assert "single str" in error(from_lists, "abc", None)


def test_labelled_data_rejects_mismatched_lengths():
    with pytest.raises(DataError):
        LabelledData(["a", "b"], ["x"], "<memory>", [1, 2])
    with pytest.raises(DataError):
        LabelledData(["a", "b"], [], "<memory>", [1])


# --------------------------------------------------------------------------------------------------------------
# Checks


def test_check_training_data(tmp_path):
    assert check_training_data(from_lists(["a", "b", "c"], ["z", "y", "z"])) == ["y", "z"]
    path = write(tmp_path / "one.csv", "text,label\na,ham\nb,ham\n")
    msg = error(check_training_data, load_dataset(path))
    assert "one.csv" in msg and "'ham'" in msg and "2 classes" in msg
    assert "labels" in error(check_training_data, from_lists(["a"], None))


def test_check_eval_labels(tmp_path):
    path = write(tmp_path / "ev.csv", 'text,label\na,ham\n"b\nc",ham\nd,spma\ne,spma\nf,other\n')
    data = load_dataset(path)
    check_eval_labels(["ham", "spma", "other"], data)  # no error when all are known
    msg = error(check_eval_labels, ["ham", "spam"], data)
    assert "ev.csv" in msg and "'spma'" in msg and "line 5" in msg and "'other'" in msg and "line 7" in msg
    assert "ham, spam" in msg  # the known labels
    assert "none" in error(check_eval_labels, ["ham"], from_lists(["a"], None))


# --------------------------------------------------------------------------------------------------------------
# stratified_split


def _imbalanced(n_major=90, n_minor=10) -> LabelledData:
    labels = ["major"] * n_major + ["minor"] * n_minor
    return from_lists([f"text {i}" for i in range(len(labels))], labels)


def test_stratified_split_deterministic_and_stratified():
    data = _imbalanced()
    train, test = stratified_split(data, test_size=0.2, seed=3)
    again_train, again_test = stratified_split(data, test_size=0.2, seed=3)
    assert (train.texts, test.texts) == (again_train.texts, again_test.texts)
    assert Counter(test.labels) == {"major": 18, "minor": 2}
    assert Counter(train.labels) == {"major": 72, "minor": 8}
    assert sorted(train.texts + test.texts) == sorted(data.texts)  # a partition: nothing lost or repeated
    assert train.rows == sorted(train.rows)  # file order kept
    assert [data.texts[r - 1] for r in test.rows] == test.texts  # rows still point into the source
    other_train, _ = stratified_split(data, test_size=0.2, seed=4)
    assert other_train.texts != train.texts


def test_stratified_split_rare_class_in_both_parts():
    # 2 of 200 at 10%: proportional allocation would give "rare" no test row.
    data = _imbalanced(198, 2)
    train, test = stratified_split(data, test_size=0.1, seed=0)
    assert set(train.labels) == set(test.labels) == {"major", "minor"}
    assert len(train) + len(test) == 200


def test_stratified_split_single_example_stays_in_train(caplog):
    data = from_lists([f"t{i}" for i in range(21)], ["a"] * 10 + ["b"] * 10 + ["solo"])
    with caplog.at_level(logging.INFO, logger="headswap.data.load"):
        train, test = stratified_split(data, test_size=0.2, seed=0)
    assert "solo" in train.labels and "solo" not in test.labels
    assert set(test.labels) == {"a", "b"}
    assert len(train) + len(test) == 21
    assert "solo" in caplog.text


def test_stratified_split_tiny_test_size():
    # test_size too small for sklearn to give each class a test row: still one per class on each side.
    data = from_lists([f"t{i}" for i in range(9)], ["a", "a", "a", "b", "b", "b", "c", "c", "c"])
    train, test = stratified_split(data, test_size=0.05, seed=1)
    assert sorted(test.labels) == ["a", "b", "c"]
    assert set(train.labels) == {"a", "b", "c"}


def test_stratified_split_errors():
    assert "labels" in error(stratified_split, from_lists(["a", "b"], None))
    assert "test_size" in error(stratified_split, _imbalanced(), test_size=1.5)
    assert "two or more" in error(stratified_split, from_lists(["a", "b"], ["x", "y"]))


# --------------------------------------------------------------------------------------------------------------
# load_descriptions


def test_descriptions_none_and_dict(caplog):
    assert load_descriptions(None, ["spam", "ham"]) == {"spam": "spam", "ham": "ham"}
    with caplog.at_level(logging.INFO, logger="headswap.data.load"):
        got = load_descriptions({"spam": "unwanted advertising"}, ["ham", "spam"])
    assert got == {"ham": "ham", "spam": "unwanted advertising"}  # missing label falls back to its name
    assert "ham" in caplog.text
    assert load_descriptions({0: "negative", 1: "positive"}, ["0", "1"]) == {"0": "negative", "1": "positive"}


def test_descriptions_unknown_label():
    msg = error(load_descriptions, {"spma": "junk"}, ["ham", "spam"])
    assert "'spma'" in msg and "ham, spam" in msg


def test_descriptions_json(tmp_path):
    path = write(tmp_path / "d.json", json.dumps({"ham": "a normal message", "spam": " junk "}))
    assert load_descriptions(path, ["ham", "spam"]) == {"ham": "a normal message", "spam": " junk "}
    assert load_descriptions(str(path), ["ham", "spam"])["spam"] == " junk "
    msg = error(load_descriptions, path, ["ham"])
    assert "d.json" in msg and "'spam'" in msg
    bad = write(tmp_path / "bad.json", '{"ham": "x",\n "spam": }')
    msg = error(load_descriptions, bad, ["ham", "spam"])
    assert "bad.json" in msg and "line 2" in msg
    assert "bad.json" in error(load_descriptions, write(bad, '{"ham": 3}'), ["ham"])
    assert "bad.json" in error(load_descriptions, write(bad, '["ham"]'), ["ham"])


def test_descriptions_csv_and_tsv(tmp_path):
    path = write_csv(tmp_path / "d.csv", [["label", "description"], ["spam", "junk, unwanted"], ["ham", "normal"]])
    assert load_descriptions(path, ["ham", "spam"]) == {"ham": "normal", "spam": "junk, unwanted"}
    tsv = write_csv(tmp_path / "d.tsv", [["description", "label"], ["normal", "ham"]], "\t")
    assert load_descriptions(tsv, ["ham", "spam"]) == {"ham": "normal", "spam": "spam"}


def test_descriptions_csv_errors(tmp_path):
    unknown = write(tmp_path / "u.csv", "label,description\nham,normal\nspma,junk\n")
    msg = error(load_descriptions, unknown, ["ham", "spam"])
    assert "u.csv" in msg and "line 3" in msg and "'spma'" in msg
    dup = write(tmp_path / "dup.csv", "label,description\nham,normal\nham,again\n")
    msg = error(load_descriptions, dup, ["ham"])
    assert "dup.csv" in msg and "line 3" in msg and "line 2" in msg
    empty = write(tmp_path / "e.csv", "label,description\nham, \n")
    msg = error(load_descriptions, empty, ["ham"])
    assert "e.csv" in msg and "line 2" in msg and "'description'" in msg
    nocol = write(tmp_path / "n.csv", "label,desc\nham,x\n")
    msg = error(load_descriptions, nocol, ["ham"])
    assert "n.csv" in msg and "'description'" in msg and "'desc'" in msg
    assert "missing.json" in error(load_descriptions, tmp_path / "missing.json", ["ham"])
    assert ".json" in error(load_descriptions, write(tmp_path / "d.yaml", "ham: x"), ["ham"])


# --------------------------------------------------------------------------------------------------------------
# Real data


def test_real_sms_spam_train():
    path = SHARED_DATA / "sms_spam" / "train.csv"
    if not path.exists():
        pytest.skip(f"{path} not present")
    data = load_dataset(path)
    assert len(data) == 4490
    assert Counter(data.labels) == {"ham": 3890, "spam": 600}
    assert check_training_data(data) == ["ham", "spam"]
    assert data.rows[0] == 2
    assert any(t != t.strip() for t in data.texts)  # surrounding spaces kept
    assert any("&lt;" in t for t in data.texts)  # HTML entities kept


def test_a_validation_hold_out_that_would_swallow_the_data_is_refused_or_reported(caplog):
    from headswap.data.load import from_lists
    from headswap.data.sampling import stratified_split
    from headswap.errors import DataError

    many = from_lists([f"t{i}" for i in range(10000)], [f"c{i % 5000}" for i in range(10000)], "many.csv")
    with pytest.raises(DataError, match=r"many.csv: holding out 10% .* takes 5000 of 10000 texts .*--eval-data"):
        stratified_split(many, 0.1)
    some = from_lists([f"t{i}" for i in range(60)], [f"c{i % 20}" for i in range(60)], "some.csv")
    with caplog.at_level("WARNING"):
        train, val = stratified_split(some, 0.1)
    assert len(val) == 20 and "takes 20 of 60 texts (33%; 20 classes)" in caplog.text


def test_a_csv_field_over_pythons_default_limit_loads_and_streams(tmp_path):
    from headswap.data.stream import iter_texts

    long_text = "word " * 60_000                                   # 300 KB, over csv's default 128 KiB
    path = tmp_path / "long.csv"
    path.write_text(f'text,label\n"{long_text}",a\nshort,b\n')
    data = load_dataset(path)
    assert data.texts[0] == long_text.strip() or data.texts[0] == long_text
    assert [t[:4] for _, t in iter_texts(path)] == ["word", "shor"]


def test_stdin_texts_drop_windows_line_ends():
    import io

    from headswap.data.stream import stdin_texts
    assert [t for _, t in stdin_texts(io.StringIO("a b\r\nc\r\n"))] == ["a b", "c"]


def test_a_tsv_named_csv_gets_a_hint(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("text\tlabel\nhello\ta\nbye\tb\n")
    with pytest.raises(DataError, match="tab-separated file\\? name it .tsv"):
        load_dataset(path)


def test_split_files_finds_the_splits_and_says_what_is_missing(tmp_path):
    (tmp_path / "test.csv").write_text("text,label\n")
    (tmp_path / "train.csv").write_text("text,label\n")
    (tmp_path / "notes.csv").write_text("")
    (tmp_path / "empty").mkdir()
    assert split_files(tmp_path) == {"train": tmp_path / "train.csv", "test": tmp_path / "test.csv"}
    assert list(split_files(tmp_path, required=("train", "test"))) == ["train", "test"]
    with pytest.raises(DataError, match=r"validation\.csv is missing: headswap x needs validation\.csv and may have "
                                        r"train\.csv and test\.csv$"):
        split_files(tmp_path, required=("validation",), who="headswap x")
    with pytest.raises(DataError, match="empty holds none of train.csv, validation.csv, test.csv"):
        split_files(tmp_path / "empty")
    with pytest.raises(DataError, match=r"nowhere' does not exist \(expected train\.csv and test\.csv in it\)"):
        split_files(tmp_path / "nowhere", required=("train", "test"))
