"""Writing to Iceberg tables: staged on a branch, checked, published in one swap.

The writer's API, in one import. A write goes to a branch cut from `main` (`stage`,
runtime/staged.py); what it wrote can be read and audited there (`StagedWrite.read`);
`publish` (or `publish_all` for the several tables of one run) moves `main` to it in
one catalog transaction (runtime/publish.py).
When another writer moved `main` meanwhile, the write is replayed on the new `main`
under Iceberg's conflict validation within its `scope` (what it was decided against:
the whole table by default, its partition window, or nothing for a blind append),
so writers of different partitions (a backfill and the stream) both publish at once.
A write that is not published leaves `main` exactly as it was.

On a true conflict, `with_commit_retries` runs the whole write again on the new
`main`: it re-reads its inputs, re-stages, re-validates what it decided against
(files already taken, keys already held) and publishes; a write that keeps losing
fails after `COMMIT_ATTEMPTS` with nothing published.

Every published head carries the Dagster run id, asset and partition range in its
snapshot summary; the figures of all snapshots written on the branch come back
as Dagster materialisation metadata. Writes conform to the table's schema first
(`conform`): safe changes evolve the table, unsafe ones fail naming the column.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from dagster import MaterializeResult, MetadataValue

from ..errors import ConcurrentCommitError
from .conflicts import retry_commit
from .publish import publish, publish_all
from .staged import (
    ASSET,
    CURRENT,
    EVERYTHING,
    NOTHING,
    PARTITIONS,
    RUN_ID,
    WRITE_ID,
    CommitResult,
    StagedWrite,
    Window,
    current_state,
    stage,
)

__all__ = ["ASSET", "CURRENT", "EVERYTHING", "NOTHING", "PARTITIONS", "RUN_ID", "WRITE_ID", "CommitResult",
           "StagedWrite", "Window", "current_state", "materialize_with_retries", "publish", "publish_all",
           "retry_metadata", "stage", "with_commit_retries"]

T = TypeVar("T")
COMMIT_ATTEMPTS = 6


def with_commit_retries(attempt: Callable[[], T], what: str, log: Callable[[str], None] = print,
                        attempts: int = COMMIT_ATTEMPTS) -> tuple[T, int]:
    """Run `attempt` (read, stage, check, publish) until it publishes; (its result, the retries it took).

    Each retry starts from scratch on the new `main`, so what the write decided
    against is decided again (runtime/conflicts.py says which failures are retried).
    After `attempts` lost races it fails, nothing published.
    """
    def gave_up(exc: BaseException, n: int) -> BaseException:
        return ConcurrentCommitError(f"{exc}; gave up after {n} attempts, each re-staged on the newest main")

    return retry_commit(attempt, what, attempts, log, gave_up=gave_up, again="re-staging on the new main")


def retry_metadata(retries: int) -> dict[str, Any]:
    return {"commit_retries": MetadataValue.int(retries)}


def materialize_with_retries(attempt: Callable[[], MaterializeResult], what: str,
                             log: Callable[[str], None] = print) -> MaterializeResult:
    """`with_commit_retries` for an asset body that returns one MaterializeResult; the retries join its metadata."""
    result, retries = with_commit_retries(attempt, what, log)
    return MaterializeResult(asset_key=result.asset_key, metadata={**(result.metadata or {}), **retry_metadata(retries)},
                             check_results=result.check_results, data_version=result.data_version)
