"""A DataFrame's transformations built once per process and applied again to other inputs of the same columns.

Building a wide parse (a CDC image's decoding, a declaration's typing) makes thousands of JVM round trips from
Python, one per column function, and takes the driver most of a second per table on every run, micro-batch or
pass, for the same expressions each time. Columns are unresolved expressions, not bound to a DataFrame, so a
recipe records the transformations a build makes on a stand-in for its input (the columns and arguments it
passed) and replays them on the next input: the same plan, a handful of round trips.

Only what can be replayed is recorded: a build that reads anything of its input but its column names (its
rows, its schema, a column bound to it) stops the recording, and that build runs on its input every time.

Replaying is cheap in round trips but not in Spark's analysis: each recorded step is a DataFrame, analysed when
made, and a wide parse's steps (projections of hundreds of expressions) take Spark about a quarter of a second
each. So the first replay's result is kept with its input, and the next input of the same columns and types is
put under that analysed plan in the JVM (`lakehouse.PlanInput`): one analysis of the whole, already resolved.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark import SparkContext
from pyspark.errors import IllegalArgumentException
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame

from .spark import jvm_class

# DataFrame methods that return a new DataFrame from their arguments alone (no job, nothing read).
_TRANSFORMATIONS = frozenset({
    "withColumn", "withColumns", "withColumnRenamed", "withColumnsRenamed", "select", "selectExpr", "where",
    "filter", "drop", "unionByName", "union", "alias", "toDF",
})
_LOG = logging.getLogger(__name__)
_KEPT = 256  # recipes a process keeps (a source and table schema each; the least recently used goes first)


class NotReplayable(Exception):
    """The build read something of its input beyond its column names."""


class _Stand:
    """Stands in for a DataFrame while a build runs: records each transformation made of it."""

    def __init__(self, columns: list[str] | None, parent: _Stand | None = None, step: tuple | None = None):
        self._columns, self._parent, self._step = columns, parent, step

    @property
    def columns(self) -> list[str]:
        if self._columns is None:  # a transformed frame's columns are known only to Spark
            raise NotReplayable("the columns of a transformed frame")
        return list(self._columns)

    def __getattr__(self, name: str) -> Any:
        if name not in _TRANSFORMATIONS:
            raise NotReplayable(f"DataFrame.{name}")
        return lambda *args, **kwargs: _Stand(None, self, (name, args, kwargs))

    def __getitem__(self, item: Any) -> Any:
        raise NotReplayable("a column bound to the frame")


def _replay(node: Any, source: DataFrame, done: dict[int, DataFrame]) -> Any:
    """`node` with every stand-in replaced by the DataFrame it stands for, its input being `source`."""
    if isinstance(node, _Stand):
        if id(node) not in done:
            if node._parent is None:
                done[id(node)] = source
            else:
                name, args, kwargs = node._step  # type: ignore[misc]
                frame = _replay(node._parent, source, done)
                done[id(node)] = getattr(frame, name)(*_replay(list(args), source, done),
                                                      **_replay(kwargs, source, done))
        return done[id(node)]
    if isinstance(node, list | tuple):
        return type(node)(_replay(x, source, done) for x in node)
    if isinstance(node, dict):
        return {k: _replay(v, source, done) for k, v in node.items()}
    return node


class Recipes:
    """Per key, the transformations a build made of its input; kept for the process's JVM."""

    def __init__(self, kept: int = _KEPT):
        self._kept, self._lock = kept, threading.Lock()
        self._recipes: OrderedDict[Hashable, tuple[Any, _Stand | None]] = OrderedDict()
        self._made: dict[Hashable, tuple[DataFrame, DataFrame]] = {}  # per key, an input and what it made

    def apply(self, key: Hashable, build: Callable[[Any], DataFrame], source: DataFrame) -> DataFrame:
        """`build(source)`, its transformations recorded the first time under `key` (with the source's column
        names: a key must name everything else the build depends on) and replayed after."""
        key = (key, tuple(source.columns))
        gateway = SparkContext._gateway  # a recipe's columns live in the JVM they were built in
        with self._lock:
            known = self._recipes.get(key)
            if known is not None:
                self._recipes.move_to_end(key)
        if known is not None and known[0] is gateway:
            recipe = known[1]
            made = self._made.get(key)
            if made is not None:
                substituted = _substituted(*made, source)
                if substituted is not None:
                    return substituted
        else:
            recipe = _recorded(build, list(source.columns))
            with self._lock:
                self._recipes[key] = (gateway, recipe)
                while len(self._recipes) > self._kept:
                    self._made.pop(self._recipes.popitem(last=False)[0], None)
        if recipe is None:
            return build(source)
        result = _replay(recipe, source, {})
        with self._lock:
            if key in self._recipes:
                self._made[key] = (source, result)
        return result


def _substituted(source: DataFrame, result: DataFrame, new: DataFrame) -> DataFrame | None:
    """`result`'s analysed plan over `new` where it read `source`; None when that cannot be done (`new`'s columns
    of other types, a plan the substitution does not know how to rewrite): the recipe replayed then analyses its
    steps for `new`."""
    try:
        frame = jvm_class(new.sparkSession, "lakehouse.PlanInput").substitute(result._jdf, source._jdf, new._jdf)
    except IllegalArgumentException:  # refused, as PlanInput says why
        return None
    except (CapturedException, Py4JJavaError) as error:
        _LOG.warning("the parse's kept plan could not be put over the new input; it is replayed: %s", error)
        return None
    return DataFrame(frame, new.sparkSession)


def _recorded(build: Callable[[Any], DataFrame], columns: list[str]) -> _Stand | None:
    """What `build` makes of a frame of these columns, as a recipe; None when it cannot be replayed."""
    try:
        recipe = build(_Stand(columns))
    except Exception:  # noqa: BLE001 - not replayable, or failing: the build on the input itself says which
        return None
    return recipe if isinstance(recipe, _Stand) else None
