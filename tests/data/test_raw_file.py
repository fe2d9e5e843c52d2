import pytest

from contrastive_sentence_embeddings.data.raw_file import RawFile
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
    # one reason for every undecodable line; where the first bad byte is goes with the example
    assert report.dropped == {"not utf-8": 1}
    assert report.examples["not utf-8"] == [f"{raw.label}:2 (byte 3)"]


def test_strict_mode_names_file_and_line(write_file):
    raw = write_file("bad.txt", b"ok\n\xff\xfe oops\n")
    with pytest.raises(BadInputError, match=r"bad\.txt:2: not utf-8 \(byte 0\)"):
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
    assert report.dropped == {"not utf-8": 8}
    assert len(report.examples["not utf-8"]) == MAX_EXAMPLES_PER_REASON

    target = StepReport("documents")
    target.absorb(report, prefix="line ", keep=lambda reason: reason.startswith("not "))
    assert target.dropped == {"line not utf-8": 8}
    assert target.examples["line not utf-8"] == report.examples["not utf-8"]


# --- streaming: a reader never holds a whole file --------------------------------------
def current_rss_bytes() -> int:
    """This process's resident memory now (not its peak, which an earlier test may have set)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def test_a_large_file_is_streamed_line_by_line_in_bounded_memory(tmp_path):
    import tracemalloc

    path = tmp_path / "large.txt"
    line = ("A line of a generated corpus, long enough to matter. " * 19)[:1000] + "\n"
    with path.open("w", encoding="utf-8") as handle:
        for _ in range(200):  # 200 MB: 200 x 1,000 lines of 1,000 bytes
            handle.write(line * 1000)
    size = path.stat().st_size
    assert size >= 200_000_000

    raw = RawFile(path)
    report = StepReport("t")
    lines = raw.iter_located_lines(report)
    rss_before = current_rss_bytes()
    tracemalloc.start()
    try:
        count, rss_growth = 0, 0
        for number, where, text in lines:
            count += 1
            if number % 20_000 == 0:
                rss_growth = max(rss_growth, current_rss_bytes() - rss_before)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == report.rows_in == 200_000 and text == line.rstrip("\n") and where == f"{raw.label}:200000"
    # A line at a time: Python allocations and resident memory stay far below the file's size.
    assert peak < 4_000_000, f"{peak / 1e6:.1f} MB allocated while reading a {size / 1e6:.0f} MB file"
    assert rss_growth < 64_000_000, f"resident memory grew by {rss_growth / 1e6:.1f} MB"


def test_the_label_is_resolved_once_per_file_not_once_per_line(write_file, monkeypatch):
    from pathlib import Path

    # 500 good lines, then an undecodable one (whose report names the file too)
    raw = write_file("many.txt", "".join(f"line {i}\n" for i in range(500)).encode() + b"caf\xe9\n" + b"last\n")
    calls = []
    original = Path.cwd
    monkeypatch.setattr(Path, "cwd", classmethod(lambda cls: calls.append(1) or original()))
    report = StepReport("t")
    located = list(raw.iter_located_lines(report))
    # a reader that names the file on every line, as the one-document-per-line reader does
    named = [f"{raw.label}:{number}" for number, _ in raw.iter_lines(StepReport("t"))]
    assert len(located) == 501 and located[-1][1] == named[-1] == f"{raw.label}:502"
    assert report.examples["not utf-8"] == [f"{raw.label}:501 (byte 3)"]
    assert len(calls) == 1
