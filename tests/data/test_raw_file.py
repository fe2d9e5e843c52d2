import pytest

from contrastive_sentence_embeddings.data.report import BadInputError, StepReport


def test_lines_are_numbered_from_one_and_stripped_of_line_endings(write_file):
    raw = write_file("a.txt", "first\r\nsecond\n\nfourth")
    report = StepReport("t")
    assert list(raw.iter_lines(report)) == [(1, "first"), (2, "second"), (3, ""), (4, "fourth")]
    assert report.rows_in == 4


def test_a_non_utf8_line_is_skipped_and_counted_with_its_location(write_file):
    raw = write_file("bad.txt", b"good one\ncaf\xe9 latin-1\nlast\n")
    report = StepReport("t")
    assert [n for n, _ in raw.iter_lines(report)] == [1, 3]
    assert report.rows_in == 3
    (reason, count), = report.dropped.items()
    assert reason.startswith("not utf-8") and count == 1
    assert report.examples[reason] == [f"{raw.label}:2"]


def test_strict_mode_names_file_and_line(write_file):
    raw = write_file("bad.txt", b"ok\n\xff\xfe oops\n")
    with pytest.raises(BadInputError, match=r"bad\.txt:2: not utf-8"):
        list(raw.iter_lines(StepReport("t"), on_bad_input="error"))


def test_utf8_bom_is_removed_from_the_first_line_only(write_file):
    raw = write_file("bom.txt", "\ufeffhello\n\ufeffsecond\n")
    assert list(raw.iter_lines(StepReport("t"))) == [(1, "hello"), (2, "\ufeffsecond")]


def test_an_unknown_bad_input_policy_is_rejected(write_file):
    raw = write_file("bad.txt", b"\xff\n")
    with pytest.raises(ValueError, match="on_bad_input"):
        list(raw.iter_lines(StepReport("t"), on_bad_input="ignore"))


def test_numbered_lines_and_absorbed_counts_keep_the_example_limit(write_file):
    from contrastive_sentence_embeddings.data.report import MAX_EXAMPLES_PER_REASON

    raw = write_file("many.txt", b"ok\n" + b"\xff\n" * 8 + b"last\n")
    report = StepReport("t")
    lines, n_lines = raw.read_numbered_lines(report)
    assert lines == {1: "ok", 10: "last"} and n_lines == 10
    assert report.rows_in == 0  # rows are the caller's to count
    assert report.dropped == {"not utf-8 (byte 0)": 8}
    assert len(report.examples["not utf-8 (byte 0)"]) == MAX_EXAMPLES_PER_REASON

    target = StepReport("documents")
    target.absorb(report, prefix="line ", keep=lambda reason: reason.startswith("not "))
    assert target.dropped == {"line not utf-8 (byte 0)": 8}
    assert target.examples["line not utf-8 (byte 0)"] == report.examples["not utf-8 (byte 0)"]
