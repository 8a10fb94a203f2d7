"""Named crash and pause points, to prove what a real crash, or another process acting at that instant, leaves
behind.

`LAKEHOUSE_FAILPOINTS=bronze_events:before-publish` makes the process kill itself
with SIGKILL when it reaches that point: no cleanup, no exception handlers, as a
lost machine would. `name@N` kills the N-th time the point is reached.
`name~pause` holds the process there instead: it creates `<name>.paused` in the
folder `LAKEHOUSE_FAILPOINT_DIR` and goes on once `<name>.go` appears there (a
test's way to act between two steps of a run). Unset, a failpoint costs one
environment lookup.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

_reached: Counter = Counter()


def failpoint(name: str) -> None:
    armed = os.environ.get("LAKEHOUSE_FAILPOINTS", "")
    if not armed:
        return
    for point in (p.strip() for p in armed.split(",")):
        wanted, _, action = point.partition("~")
        wanted, _, nth = wanted.partition("@")
        if wanted == name:
            _reached[name] += 1
            if _reached[name] >= int(nth or 1):
                if action == "pause":
                    _pause(name)
                else:
                    os.kill(os.getpid(), signal.SIGKILL)


def _pause(name: str) -> None:
    folder = Path(os.environ["LAKEHOUSE_FAILPOINT_DIR"])
    (folder / f"{name}.paused").touch()
    while not (folder / f"{name}.go").exists():
        time.sleep(0.2)
