"""Named crash points, to prove what a real crash at that instant leaves behind.

`LAKEHOUSE_FAILPOINTS=bronze_events:before-publish` makes the process kill itself
with SIGKILL when it reaches that point: no cleanup, no exception handlers, as a
lost machine would. Unset, a failpoint costs one environment lookup.
"""

from __future__ import annotations

import os
import signal


def failpoint(name: str) -> None:
    armed = os.environ.get("LAKEHOUSE_FAILPOINTS", "")
    if armed and name in {p.strip() for p in armed.split(",")}:
        os.kill(os.getpid(), signal.SIGKILL)
