"""Reading raw text files line by line, with every bad line located.

The raw inputs are plain files from an offline mirror or the Hub. Decoding is done
per line so that one bad byte costs one line (counted, with ``file:line``), not the
whole file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from contrastive_sentence_embeddings.data.report import StepReport, handle_bad_input

UTF8_BOM = "\ufeff"


@dataclass(frozen=True)
class RawFile:
    """A handle on one raw file: a path and how to decode it. Reading is lazy, so a
    multi-GB file is streamed, never loaded whole."""

    path: Path
    encoding: str = "utf-8"

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def label(self) -> str:
        """The path as shown in reports and errors: relative to the working directory
        (the project root under ``kedro run``) when inside it, so that outputs do not
        depend on where the project is checked out."""
        try:
            return self.path.resolve().relative_to(Path.cwd().resolve()).as_posix()
        except ValueError:
            return str(self.path)

    def read_bytes(self) -> bytes:
        return self.path.read_bytes()

    def iter_lines(
        self, report: StepReport, on_bad_input: str = "skip"
    ) -> Iterator[tuple[int, str]]:
        """Yield ``(line_number, text)`` for every decodable line (1-based numbers,
        line ending stripped, a leading UTF-8 byte-order mark removed).

        A line that is not valid in ``self.encoding`` is skipped and counted under
        "not <encoding>" (or raises in strict mode) with its ``file:line``. Every
        line read counts towards ``report.rows_in``.
        """
        with self.path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                report.rows_in += 1
                try:
                    text = raw.decode(self.encoding)
                except UnicodeDecodeError as err:
                    handle_bad_input(
                        report,
                        f"not {self.encoding} (byte {err.start})",
                        f"{self.label}:{number}",
                        on_bad_input,
                    )
                    continue
                if number == 1 and text.startswith(UTF8_BOM):
                    text = text[1:]
                yield number, text.rstrip("\r\n")

    def iter_located_lines(
        self, report: StepReport, on_bad_input: str = "skip"
    ) -> Iterator[tuple[int, str, str]]:
        """:meth:`iter_lines` with each line's ``file:line`` location, for readers that
        report bad rows. The label is resolved once per file, not once per line (it
        touches the file system)."""
        label = self.label
        for number, text in self.iter_lines(report, on_bad_input):
            yield number, f"{label}:{number}", text

    def read_numbered_lines(
        self, report: StepReport, on_bad_input: str = "skip"
    ) -> tuple[dict[int, str], int]:
        """All decodable lines by line number, and the number of lines in the file, for
        files that must be aligned line by line with another. Undecodable lines are
        counted in ``report``; ``report.rows_in`` is left to the caller, who knows what
        a row is."""
        scratch = StepReport(report.step)
        lines = dict(self.iter_lines(scratch, on_bad_input))
        report.absorb(scratch)
        return lines, scratch.rows_in


def folder_partitions(folder: str | Path) -> dict[str, Callable[[], RawFile]]:
    """Every file under ``folder`` as a Kedro ``PartitionedDataset`` of raw files loads
    it: ``{relative/posix/path: loader}``. For scripts and tests that read a raw
    folder (e.g. the offline mirror) without a Kedro session."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): (lambda p=p: RawFile(p)) for p in sorted(folder.rglob("*")) if p.is_file()}
