"""Reading raw text files line by line, with every bad line located.

The raw inputs are plain files from an offline mirror or the Hub. Decoding is done
per line so that one bad byte costs one line (counted, with ``file:line``), not the
whole file.

Decoding is by detection, line by line: UTF-8 first (a byte-order mark on the first
line is dropped), then, for a file declared in a legacy encoding (SentEval's TREC
training file is ISO-8859-1), that encoding, each such line counted as a variant
("decoded as iso-8859-1"). So a legacy file re-saved as UTF-8 is read right instead of
being silently turned into mojibake, and the original is read right too, with the
count saying which it was. A line that is neither is bad input, counted under one
reason ("not utf-8") with the first bad byte's offset in its example
(``file:12 (byte 43)``), so that a file's undecodable lines are one count, not one per
offset. NUL bytes (a truncated or binary-patched file) are removed from the line and
the line counted.

A UTF-16 file (Windows' "Unicode" export), with or without its byte-order mark, is
recognised from its first bytes (a BOM, or NUL bytes at every other position) and
decoded as UTF-16, every line counted as a variant: read as UTF-8, its NULs removed, it
would lose every non-ASCII line. A last line without a line ending, in a file whose
other lines have one, is a file cut short when the file is a benchmark's (all of them
end in one): their readers (``unterminated="drop"``) drop it and count it. Other files
keep it (a text of one's own often ends without a line ending).
"""

from __future__ import annotations

import codecs
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from contrastive_sentence_embeddings.data.report import StepReport, handle_bad_input
from contrastive_sentence_embeddings.runs.project_paths import project_relative

UTF8_BOM = "\ufeff"
UTF8 = "utf-8"
NUL = "\x00"
NUL_REMOVED = "NUL bytes removed"  # the variant a line with NUL bytes is counted under
CUT_LINE = "last line has no line ending (the file was cut short?)"
# How much of a file's start decides whether it is UTF-16 without a byte-order mark.
_SNIFF_BYTES = 4096


def utf16_encoding(start: bytes) -> str | None:
    """The UTF-16 codec a file starting with ``start`` is written in, or None: its
    byte-order mark, else NUL bytes on (nearly) every odd position (little-endian ASCII
    text) or every even one (big-endian), which no UTF-8 text has."""
    if start.startswith(codecs.BOM_UTF16_LE) or start.startswith(codecs.BOM_UTF16_BE):
        return "utf-16"  # the codec reads the mark and drops it
    pairs = len(start) // 2
    if pairs < 2:
        return None
    odd_nuls = start[1:2 * pairs:2].count(0)
    even_nuls = start[0:2 * pairs:2].count(0)
    if odd_nuls >= 0.9 * pairs and even_nuls <= 0.1 * pairs:
        return "utf-16-le"
    if even_nuls >= 0.9 * pairs and odd_nuls <= 0.1 * pairs:
        return "utf-16-be"
    return None


@dataclass(frozen=True)
class RawFile:
    """A handle on one raw file: a path and how to decode it. Reading is lazy, so a
    multi-GB file is streamed, never loaded whole. ``encoding`` is the file's declared
    encoding; UTF-8 is always tried first (see the module docstring). ``staged_in`` is
    the temporary folder this run downloaded the file into (a Hub source), which
    publishing it into ``data/01_raw`` empties and removes; None for any other file."""

    path: Path
    encoding: str = "utf-8"
    staged_in: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def name(self) -> str:
        return self.path.name

    @cached_property
    def label(self) -> str:
        """The path as shown in reports and errors: relative to the working directory
        (the project root under ``kedro run``) when inside it, so that outputs do not
        depend on where the project is checked out. Resolved once per handle (it
        touches the file system), however many lines name it."""
        return project_relative(self.path)

    def read_bytes(self) -> bytes:
        return self.path.read_bytes()

    def iter_lines(
        self, report: StepReport, on_bad_input: str = "skip", unterminated: str = "keep"
    ) -> Iterator[tuple[int, str]]:
        """Yield ``(line_number, text)`` for every decodable line (1-based numbers,
        line ending stripped, a leading UTF-8 byte-order mark removed, NUL bytes
        removed and counted).

        A line that is not UTF-8 is decoded with ``self.encoding`` when the file is
        declared in another encoding (counted as a variant "decoded as <encoding>"),
        else skipped and counted under "not utf-8" (or raises in strict mode) with
        its ``file:line`` and the offset of its first bad byte. Every line read counts towards ``report.rows_in``.
        """
        legacy = self.encoding.lower().replace("_", "-") not in (UTF8, "utf8", "utf-8-sig")
        with self.path.open("rb") as handle:
            wide = utf16_encoding(handle.read(_SNIFF_BYTES))
            handle.seek(0)
            if wide:
                yield from self._utf16_lines(handle, wide, report, on_bad_input, unterminated)
                return
            for number, raw in enumerate(handle, start=1):
                report.rows_in += 1
                if not raw.endswith(b"\n") and number > 1 and self._cut(number, report, on_bad_input, unterminated):
                    continue
                try:
                    text = raw.decode(UTF8)
                except UnicodeDecodeError as err:
                    label = self.label
                    if not legacy:
                        handle_bad_input(report, "not utf-8", f"{label}:{number}", on_bad_input,
                                         detail=f"byte {err.start}")
                        continue
                    try:
                        text = raw.decode(self.encoding)
                    except UnicodeDecodeError as legacy_err:
                        handle_bad_input(report, f"neither utf-8 nor {self.encoding}", f"{label}:{number}",
                                         on_bad_input, detail=f"byte {legacy_err.start}")
                        continue
                    report.variant(f"decoded as {self.encoding} (not utf-8)", where=f"{label}:{number}")
                if number == 1 and text.startswith(UTF8_BOM):
                    text = text[1:]
                if NUL in text:
                    report.variant(NUL_REMOVED, where=f"{self.label}:{number}")
                    text = text.replace(NUL, "")
                yield number, text.rstrip("\r\n")

    def _cut(self, number: int, report: StepReport, on_bad_input: str, unterminated: str) -> bool:
        """Line ``number``, the file's last, has no line ending: True (it is dropped and
        counted) for ``unterminated="drop"``."""
        if unterminated != "drop":
            return False  # a text of one's own often ends without a line ending: nothing to say
        handle_bad_input(report, CUT_LINE, f"{self.label}:{number}", on_bad_input)
        return True

    def _utf16_lines(self, handle, encoding: str, report: StepReport, on_bad_input: str,
                     unterminated: str) -> Iterator[tuple[int, str]]:
        """The lines of a UTF-16 file (module docstring), each counted as a variant."""
        text = io.TextIOWrapper(handle, encoding=encoding, errors="replace", newline="")
        number = 0
        for number, line in enumerate(text, start=1):
            report.rows_in += 1
            if not line.endswith(("\n", "\r")) and number > 1 and self._cut(number, report, on_bad_input,
                                                                              unterminated):
                continue
            report.variant(f"decoded as {encoding} (not utf-8)", where=f"{self.label}:{number}")
            if "\ufffd" in line:
                handle_bad_input(report, f"not {encoding}", f"{self.label}:{number}", on_bad_input)
                continue
            yield number, line.rstrip("\r\n")

    def iter_located_lines(
        self, report: StepReport, on_bad_input: str = "skip", unterminated: str = "keep"
    ) -> Iterator[tuple[int, str, str]]:
        """:meth:`iter_lines` with each line's ``file:line`` location, for readers that
        report bad rows."""
        label = self.label
        for number, text in self.iter_lines(report, on_bad_input, unterminated):
            yield number, f"{label}:{number}", text

    def read_numbered_lines(
        self, report: StepReport, on_bad_input: str = "skip", unterminated: str = "keep"
    ) -> tuple[dict[int, str], int]:
        """All decodable lines by line number, and the number of lines in the file, for
        files that must be aligned line by line with another. Undecodable lines are
        counted in ``report``; ``report.rows_in`` is left to the caller, who knows what
        a row is."""
        scratch = StepReport(report.step)
        lines = dict(self.iter_lines(scratch, on_bad_input, unterminated))
        report.absorb(scratch)
        return lines, scratch.rows_in


def folder_partitions(folder: str | Path) -> dict[str, Callable[[], RawFile]]:
    """Every file under ``folder`` as a Kedro ``PartitionedDataset`` of raw files loads
    it: ``{relative/posix/path: loader}``. For scripts and tests that read a raw
    folder (e.g. the offline mirror) without a Kedro session."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): (lambda p=p: RawFile(p)) for p in sorted(folder.rglob("*")) if p.is_file()}
