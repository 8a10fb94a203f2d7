"""What a failed commit means, decided in one place, and the one policy that retries it.

A failure is told by its exception classes, never by its message: Python's
(pyiceberg's, the catalog database driver's, this package's) and, for what Spark
and Iceberg raise in the JVM, the Java classes of the exception and its causes.

- `LOST_RACE`: the table's metadata moved under the commit (Iceberg's
  `CommitFailedException`); the same work can commit on the new metadata.
- `CONFLICT`: a concurrent commit changed what the write was decided against
  (Iceberg's `ValidationException`, or `ConcurrentCommitError` raised by
  runtime/publish.py); the write must be decided again from the new `main`.
- `CATALOG_BUSY`: the catalog's database refused the transaction for a lock
  (SQLite busy or locked; PostgreSQL deadlock, serialization failure, lock not
  available); the transaction rolled back, so it can run again.

Anything else, and `CommitStateUnknownException` (the commit may have landed:
running it again could write twice), is not retried.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

from ..errors import ConcurrentCommitError, PublishedError

T = TypeVar("T")
LOST_RACE = "lost race"
CONFLICT = "conflict"
CATALOG_BUSY = "catalog busy"
EVERY_KIND = (LOST_RACE, CONFLICT, CATALOG_BUSY)

_JAVA = {
    "org.apache.iceberg.exceptions.CommitFailedException": LOST_RACE,
    "org.apache.iceberg.exceptions.ValidationException": CONFLICT,
}
_JAVA_UNKNOWN = "org.apache.iceberg.exceptions.CommitStateUnknownException"
_SQLITE_BUSY_OR_LOCKED = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (primary result codes: the low byte)
_POSTGRES_LOCKS = ("40P01", "40001", "55P03")  # deadlock_detected, serialization_failure, lock_not_available


def _python_chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__  # explicit causes only (`raise ... from`), not the exception being handled


def _java_throwable(exc: BaseException) -> Any:
    """The JVM's exception behind a Python one: py4j's error, or PySpark's conversion of it."""
    return getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)


def _java_chain(throwable: Any) -> Iterator[tuple[str, Any]]:
    for _ in range(32):  # a cause chain that loops ends here
        if throwable is None:
            return
        yield throwable.getClass().getName(), throwable
        throwable = throwable.getCause()


def _busy_database(exc: BaseException) -> bool:
    """A lock refusal of the catalog database, through SQLAlchemy or the driver itself."""
    driver = getattr(exc, "orig", None) or exc  # SQLAlchemy's DBAPIError wraps the driver's exception
    code = getattr(driver, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _SQLITE_BUSY_OR_LOCKED
    return getattr(driver, "pgcode", None) in _POSTGRES_LOCKS


def _busy_java_database(name: str, throwable: Any) -> bool:
    if name == "org.sqlite.SQLiteException":
        return throwable.getErrorCode() & 0xFF in _SQLITE_BUSY_OR_LOCKED
    if name == "org.postgresql.util.PSQLException":
        return throwable.getSQLState() in _POSTGRES_LOCKS
    return False


def _decide(exc: BaseException) -> tuple[str | None, str]:
    """(what the failure is, the first line of what the exception that decided it says)."""
    for error in _python_chain(exc):
        if isinstance(error, (PublishedError, CommitStateUnknownException)):
            return None, _first_line(str(error))  # may already be on main: running it again could write twice
        if isinstance(error, ConcurrentCommitError):
            return CONFLICT, _first_line(str(error))
        if isinstance(error, CommitFailedException):
            return LOST_RACE, _first_line(str(error))
        if _busy_database(error):
            return CATALOG_BUSY, _first_line(str(error))
        for name, throwable in _java_chain(_java_throwable(error)):
            kind = None if name == _JAVA_UNKNOWN else _JAVA.get(name)
            if kind is None and _busy_java_database(name, throwable):
                kind = CATALOG_BUSY
            if kind is not None or name == _JAVA_UNKNOWN:
                return kind, _first_line(throwable.getMessage() or name)
    return None, _first_line(str(exc)) or type(exc).__name__


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def commit_failure(exc: BaseException) -> str | None:
    """LOST_RACE, CONFLICT or CATALOG_BUSY when running the commit again is safe and may succeed; else None."""
    return _decide(exc)[0]


def failure_message(exc: BaseException) -> str:
    """The first line of what the failure says: the JVM's own message when it came from there."""
    return _decide(exc)[1]


def retry_commit(action: Callable[[], T], what: str, attempts: int, log: Callable[[str], None] = print,
                 kinds: tuple[str, ...] = EVERY_KIND, pause_s: tuple[float, float] = (0.1, 0.6),
                 gave_up: Callable[[BaseException, int], BaseException] | None = None,
                 again: str = "running it again") -> tuple[T, int]:
    """Run `action` until it commits: (its result, the retries it took).

    A failure of one of `kinds` runs it again after a random pause that grows with each attempt (writers
    that collided do not collide again in step); any other failure is raised at once. After `attempts`
    the last failure is raised, or what `gave_up(failure, attempts)` makes of it.
    """
    for n in range(attempts):
        try:
            return action(), n
        except Exception as exc:
            kind = commit_failure(exc)
            if kind not in kinds:
                raise
            if n + 1 == attempts:
                if gave_up is None:
                    raise
                raise gave_up(exc, attempts) from exc
            log(f"{what}: {kind} ({failure_message(exc)}); {again} (attempt {n + 2} of {attempts})")
            time.sleep(random.uniform(*pause_s) * (n + 1))
    raise AssertionError("unreachable")
