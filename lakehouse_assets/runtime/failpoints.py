"""Named crash points, to prove what a real crash at that instant leaves behind.

`LAKEHOUSE_FAILPOINTS=bronze_events:before-publish` makes the process kill itself
with SIGKILL when it reaches that point: no cleanup, no exception handlers, as a
lost machine would. `name@N` kills the N-th time the point is reached. Unset, a
failpoint costs one environment lookup.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

_reached: Counter = Counter()


def failpoint(name: str) -> None:
    armed = os.environ.get("LAKEHOUSE_FAILPOINTS", "")
    if not armed:
        return
    for point in (p.strip() for p in armed.split(",")):
        wanted, _, nth = point.partition("@")
        if wanted == name:
            _reached[name] += 1
            if _reached[name] >= int(nth or 1):
                os.kill(os.getpid(), signal.SIGKILL)
