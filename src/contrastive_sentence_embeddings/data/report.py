"""Row accounting shared by every data-preparation step.

Each step counts the rows it read, the rows it kept, and every dropped row under a
reason. The counts are logged and collected into one JSON data report, so that no
row disappears without a trace.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# How many example locations ("file:line") are kept per drop reason.
MAX_EXAMPLES_PER_REASON = 5
# Drop reasons that are the data's own layout, not a fault of the input: the log says
# why beside the count, so that the count does not read as lost rows.
BY_DESIGN = {
    "unscored pair": "the STS files list pairs without a gold score; no benchmark scores them, as in SentEval",
}


class BadInputError(ValueError):
    """Raised for malformed input when a step runs in strict mode (``on_bad_input: error``)."""


class EmptyInputError(BadInputError):
    """An input file with no rows, or a step that produced no rows: raised whatever
    ``on_bad_input`` says, because a run on nothing would look like a run."""


def require_rows(count: int, what: str) -> None:
    """Stop with :class:`EmptyInputError` naming ``what`` (a file or a step) when
    ``count`` is 0."""
    if count == 0:
        raise EmptyInputError(f"{what}: no rows; refusing to go on with an empty data set")


@dataclass
class StepReport:
    """Counts of one data-preparation step.

    ``rows_in`` is everything the step looked at, ``rows_out`` what it produced, and
    ``dropped`` maps a human-readable reason to a count. ``examples`` keeps up to
    :data:`MAX_EXAMPLES_PER_REASON` locations per reason, so a researcher can open
    the offending file at the right line. ``variants`` counts rows that were kept
    but read in a layout other than the usual one (e.g. STS-B rows with extra source
    columns, a line decoded with a fallback encoding), with examples the same way.
    """

    step: str
    rows_in: int = 0
    rows_out: int = 0
    dropped: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    variants: Counter = field(default_factory=Counter)
    variant_examples: dict[str, list[str]] = field(default_factory=dict)

    def variant(self, kind: str, count: int = 1, where: str | None = None) -> None:
        """Count ``count`` rows kept although read as ``kind`` (not a loss)."""
        if count <= 0:
            return
        self.variants[kind] += count
        if where is not None:
            kept = self.variant_examples.setdefault(kind, [])
            if len(kept) < MAX_EXAMPLES_PER_REASON:
                kept.append(where)

    def drop(self, reason: str, count: int = 1, where: str | None = None) -> None:
        """Count ``count`` rows dropped for ``reason``; remember ``where`` as an example."""
        if count <= 0:
            return
        self.dropped[reason] += count
        if where is not None:
            kept = self.examples.setdefault(reason, [])
            if len(kept) < MAX_EXAMPLES_PER_REASON:
                kept.append(where)

    def absorb(self, other: "StepReport", prefix: str = "", keep=lambda reason: True) -> None:
        """Add ``other``'s drop counts and examples (reasons for which ``keep`` is true,
        renamed ``prefix + reason``), respecting the per-reason example limit."""
        for reason, count in other.dropped.items():
            if keep(reason):
                examples = other.examples.get(reason, [])
                self.drop(prefix + reason, count - len(examples))
                for where in examples:
                    self.drop(prefix + reason, where=where)
        for kind, count in other.variants.items():
            examples = other.variant_examples.get(kind, [])
            self.variant(prefix + kind, count - len(examples))
            for where in examples:
                self.variant(prefix + kind, where=where)

    @property
    def rows_dropped(self) -> int:
        return sum(self.dropped.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "rows_dropped": self.rows_dropped,
            "dropped": dict(sorted(self.dropped.items())),
            "examples": {k: list(v) for k, v in sorted(self.examples.items())},
            # Only when there are some, so reports of ordinary inputs keep their shape.
            **({"variants": dict(sorted(self.variants.items())),
                "variant_examples": {k: list(v) for k, v in sorted(self.variant_examples.items())}}
               if self.variants else {}),
            **self.extra,
        }

    def log(self, logger: logging.Logger) -> None:
        by_design = sum(count for reason, count in self.dropped.items() if reason in BY_DESIGN)
        logger.info(
            "%s: %d rows in, %d rows out, %d dropped%s",
            self.step,
            self.rows_in,
            self.rows_out,
            self.rows_dropped - by_design,
            f", {by_design} left out by design" if by_design else "",
        )
        for reason, count in sorted(self.dropped.items()):
            where = self.examples.get(reason)
            if reason in BY_DESIGN:
                logger.info("%s: left out %d (%s: %s, not a fault)%s", self.step, count, reason, BY_DESIGN[reason],
                            f", e.g. {', '.join(where)}" if where else "")
                continue
            logger.info(
                "%s: dropped %d (%s)%s",
                self.step,
                count,
                reason,
                f", e.g. {', '.join(where)}" if where else "",
            )
        for kind, count in sorted(self.variants.items()):
            where = self.variant_examples.get(kind)
            logger.info("%s: kept %d read as a variant (%s)%s", self.step, count, kind,
                        f", e.g. {', '.join(where)}" if where else "")


def handle_bad_input(
    report: StepReport, reason: str, where: str, on_bad_input: str, detail: str | None = None
) -> None:
    """Skip-and-count a bad row, or raise naming its location in strict mode.

    ``detail`` says where in the row (``byte 43``, ``lines 5-9``): it goes with the
    example and the error, never into ``reason``, so that one kind of problem is one
    count however many places it occurs at."""
    if on_bad_input == "error":
        raise BadInputError(f"{where}: {reason}" + (f" ({detail})" if detail else ""))
    if on_bad_input != "skip":
        raise ValueError(
            f"on_bad_input must be 'skip' or 'error', got {on_bad_input!r}"
        )
    report.drop(reason, where=f"{where} ({detail})" if detail else where)


def rows_by_input(locations, files_by_input: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """How many of the rows located at ``locations`` (``file:line`` strings: a column
    of prepared rows, any iterable or Arrow array) come from each input, given the
    files each input read (``{input: [file label, ...]}``). Every input is counted,
    0 when none of its rows is left; a row from a file of no input is an error (the
    counts would not add up to the rows)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    input_of = {file: name for name, files in files_by_input.items() for file in files}
    counts = dict.fromkeys(files_by_input, 0)
    column = locations if isinstance(locations, (pa.Array, pa.ChunkedArray)) else pa.array(list(locations), pa.string())
    if len(column) == 0:
        return counts
    files = pc.replace_substring_regex(column, r":\d+$", "")
    for entry in pc.value_counts(files).to_pylist():
        file, count = entry["values"], entry["counts"]
        if file not in input_of:
            raise ValueError(f"rows from {file}, which none of the inputs {sorted(files_by_input)} read")
        counts[input_of[file]] += count
    return counts


def merge_reports(*reports: StepReport | dict[str, Any]) -> dict[str, Any]:
    """One JSON-able data report keyed by step name."""
    merged: dict[str, Any] = {}
    for report in reports:
        if isinstance(report, StepReport):
            merged[report.step] = report.to_dict()
        else:
            merged.update(report)
    return merged


def carry_report(error: BaseException, report: StepReport) -> BaseException:
    """Hand ``report``'s counts so far to ``error``, raised by the step it counts when
    nothing of its input could be used: the step's node returns nothing, so without
    this the data report that says why would never be written. The project's hook
    (``runs.hooks.StoppedStepReportHook``) saves ``error.data_reports`` as the step's
    report, marked ``stopped`` with the error, so that it is never taken for a
    finished step's. Returns ``error``."""
    report.extra["stopped"] = str(error)
    error.data_reports = {**(getattr(error, "data_reports", None) or {}), report.step: report.to_dict()}
    return error
