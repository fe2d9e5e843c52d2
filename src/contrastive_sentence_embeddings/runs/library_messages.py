"""Library log messages that are benign where this project triggers them, kept out of
the run's log at that one call and nowhere else (the library is never patched, and
its logging is never turned down as a whole).

Each caller says why its messages are benign and what it logs instead, if anything.
A message is held, not dropped, while the call runs: if the call fails, the held
messages are logged after all (they may explain the failure), then the error goes on.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager


class _Hold(logging.Filter):
    def __init__(self, patterns: tuple[re.Pattern, ...]):
        super().__init__()
        self.patterns = patterns
        self.held: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if any(pattern.search(message) for pattern in self.patterns):
            self.held.append(record)
            return False
        return True


@contextmanager
def held_messages(logger_name: str, *patterns: str) -> Iterator[list[logging.LogRecord]]:
    """Within the block, records of the logger ``logger_name`` whose message matches
    one of ``patterns`` (regular expressions, searched) are held back; the block gets
    the list of them. They are discarded when the block ends normally and logged as
    they were when it raises."""
    hold = _Hold(tuple(re.compile(pattern) for pattern in patterns))
    logger = logging.getLogger(logger_name)
    logger.addFilter(hold)
    try:
        yield hold.held
    except BaseException:
        logger.removeFilter(hold)
        for record in hold.held:
            logger.handle(record)
        raise
    logger.removeFilter(hold)
