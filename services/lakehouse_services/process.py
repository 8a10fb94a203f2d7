"""The processes of the local services: started with a log file, recorded in a state file, waited for, checked
and stopped, by the process that started them or by any other.

A service runs in a session of its own: a terminal's Ctrl+C reaches Python, which then stops it in order, and
one left running outlives its parent's terminal. What a client needs of it (pids, ports, URLs) is written as
JSON to a state file under the service's folder, whole or not at all, so that another process can ask whether
it runs or stop it. Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from .errors import ServiceError

HOST = "127.0.0.1"
KILL_WAIT = 5.0  # seconds a process is given to vanish after SIGKILL
T = TypeVar("T")


def _defaults() -> set[int]:
    """The ports services listen on when started without a choice: `lakehouse s3 start`'s and the SQL endpoint's
    10000. `free_ports` never hands one out, so a server started on free ports never takes the port another
    process is about to start its service on by default."""
    from .s3server import S3Ports  # it imports this module

    return {10000, *(port for port in asdict(S3Ports()).values() if port)}


class NotReady(Exception):
    """Raised by a readiness probe: the service runs but does not serve yet; the message says what it lacks."""


def _below_ephemeral() -> range:
    """The ports below the kernel's ephemeral range (from 10000): a port the kernel hands out for a connection
    (a client's side) is never one of them, so none is taken between choosing it and the server binding it."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return range(0)
    return range(10000, low) if low > 11000 else range(0)


def free_ports(n: int) -> list[int]:
    """`n` distinct ports on 127.0.0.1 that are free now, so parallel runs never share one: random ones below the
    ephemeral range where there is one, else ones the kernel gives."""
    socks: list[socket.socket] = []
    reserved = _defaults()
    candidates = [port for port in _below_ephemeral() if port not in reserved]
    try:
        while len(socks) < n:  # held open together, so the ports are distinct
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((HOST, random.choice(candidates) if candidates else 0))
            except OSError:  # in use: another
                sock.close()
                continue
            if sock.getsockname()[1] in reserved:  # the kernel's choice, where there is no range below its own
                sock.close()
                continue
            socks.append(sock)
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def free_port() -> int:
    return free_ports(1)[0]


def listening(port: int) -> bool:
    """Whether some process already accepts connections on `port` of 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((HOST, port)) == 0


def alive(pid: int, *markers: str) -> bool:
    """Whether `pid` is a live process (not a zombie) and, on Linux, one that has each of `markers` among the
    arguments of its command line: a recycled pid is never taken for (and stopped as) the service."""
    if pid <= 0:
        return False
    proc = Path(f"/proc/{pid}")
    if Path("/proc/self").exists():
        try:
            stat = (proc / "stat").read_text()
            arguments = (proc / "cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            return False
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return False  # exited, waiting to be reaped by its parent
        return all(marker.encode() in arguments for marker in markers)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def spawn(command: Sequence[str], log_file: Path, *, env: Mapping[str, str] | None = None, cwd: Path | None = None,
          append: bool = False) -> subprocess.Popen[bytes]:
    """`command` started in a session of its own, its stdout and stderr written to `log_file` (after what the
    file holds, with `append`)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab" if append else "wb") as log:
        return subprocess.Popen(list(command), cwd=cwd, env=None if env is None else dict(env),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _signal(pid: int, sig: int, group: bool) -> None:
    if pid <= 0:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def wait_gone(pids: Sequence[int], timeout: float, *markers: str) -> bool:
    """Whether every one of `pids` has exited (`alive` says no) within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while any(alive(pid, *markers) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def stop_processes(pids: Sequence[int], timeout: float, *, markers: Sequence[str] = (), sig: int = signal.SIGTERM,
                   group: bool = False, error: type[Exception] = ServiceError) -> bool:
    """Stop `pids`, signalled in their order: `sig` (SIGTERM unless said), up to `timeout` seconds for all of them
    to exit, then SIGKILL for those left. True if any of them was running.

    With `group` each pid's process group is signalled, also when the pid itself has exited: what it started
    may still run. `markers` are passed to `alive` for each pid.
    """
    running = [pid for pid in pids if alive(pid, *markers)]
    for pid in pids if group else running:
        _signal(pid, sig, group)
    if not wait_gone(running, timeout, *markers):
        for pid in running:
            if alive(pid, *markers):
                _signal(pid, signal.SIGKILL, group)
        if not wait_gone(running, KILL_WAIT, *markers):
            left = ", ".join(str(pid) for pid in running if alive(pid, *markers))
            raise error(f"pid {left} survived SIGKILL")
    return bool(running)


def tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log written)"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"


def log_tails(paths: Sequence[Path], lines: int = 40) -> str:
    """The last lines of each log file, under its path."""
    return "\n".join(f"--- last lines of {path}:\n{tail(path, lines)}" for path in paths)


def wait_ready(probe: Callable[[], T], timeout: float, *, what: str, logs: Sequence[Path],
               not_yet: tuple[type[Exception], ...] = (), exited: Callable[[], str | None] = lambda: None,
               error: type[Exception] = ServiceError, interval: float = 0.2) -> T:
    """What `probe()` returns once it returns: until the service serves, it raises `NotReady` or one of `not_yet`.

    `exited()` names what has exited (and how) once a process being waited for is gone. Then, or when `timeout`
    seconds have passed, `error` is raised with the last lines of `logs`.
    """
    deadline = time.monotonic() + timeout
    waiting: tuple[type[Exception], ...] = (NotReady, *not_yet)
    last: Exception | None = None
    while True:
        gone = exited()
        if gone:
            raise error(f"{gone} while starting\n{log_tails(logs)}")
        try:
            return probe()
        except waiting as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise error(f"{what}: not ready within {timeout:.0f} s ({last})\n{log_tails(logs)}")
        time.sleep(interval)


def write_state(path: Path, state: Mapping[str, Any]) -> None:
    """`state` as JSON at `path`, replaced whole: a reader never sees half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(path)


def read_state(path: Path, build: Callable[[dict[str, Any]], T], error: type[Exception] = ServiceError) -> T | None:
    """`build` of the JSON at `path`; None when there is no such file."""
    try:
        return build(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError) as exc:
        raise error(f"{path} is unreadable ({exc}); delete it if the service is not running") from exc


@dataclass(frozen=True)
class StateFile(Generic[T]):
    """Where a service records itself: file `name` (JSON) in the service's folder, and what it is read into."""

    name: str
    build: Callable[[dict[str, Any]], T]
    error: type[Exception] = ServiceError

    def path(self, root: Path | str) -> Path:
        return Path(root).resolve() / self.name

    def read(self, root: Path | str) -> T | None:
        return read_state(self.path(root), self.build, self.error)

    def write(self, root: Path | str, state: Mapping[str, Any]) -> None:
        write_state(self.path(root), state)

    def running(self, root: Path | str, runs: Callable[[T], bool]) -> T | None:
        """What is recorded under `root` if `runs` says it still runs, else None."""
        state = self.read(root)
        return state if state is not None and runs(state) else None

    def stop(self, root: Path | str, stop: Callable[[T], bool]) -> bool:
        """`stop` of what is recorded under `root` (True if it ran), the record removed after; False when there
        is no record."""
        state = self.read(root)
        if state is None:
            return False
        was_running = stop(state)
        self.path(root).unlink(missing_ok=True)
        return was_running
