"""Named moments at which a test can make this process die, to prove that what is on
disk after a crash is consistent.

``CSE_TEST_CRASH_AT=<point>`` makes the process exit at once (``os._exit``, no
clean-up, no ``finally`` blocks: as close to ``kill -9`` as a process can do to
itself) the first time it reaches ``<point>``; ``<point>@<n>`` the n-th time. Unset,
:func:`crash_point` does nothing. Only tests set it.
"""

from __future__ import annotations

import os
import sys

CRASH_ENV_VAR = "CSE_TEST_CRASH_AT"
CRASH_EXIT_CODE = 86
_reached: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Exit with :data:`CRASH_EXIT_CODE` if ``CSE_TEST_CRASH_AT`` names this point."""
    wanted = os.environ.get(CRASH_ENV_VAR)
    if not wanted:
        return
    point, _, nth = wanted.partition("@")
    if point != name:
        return
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] == int(nth or 1):
        sys.stderr.write(f"{CRASH_ENV_VAR}: exiting at {name} (time {_reached[name]})\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT_CODE)
