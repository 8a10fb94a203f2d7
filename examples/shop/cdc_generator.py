"""Sample change data capture from a shop database, landed as Debezium and a file sink leave it.

Three source tables are simulated as live OLTP tables and their changes written
the way a Debezium connector (JsonConverter) followed by a time-based file sink
lands them:

    <landing>/cdc/<table>/date=YYYY-MM-DD/changes-NN.jsonl

One Kafka record value per line: the change envelope
`{"before", "after", "source", "op", "ts_ms"}`, either bare or wrapped as
`{"schema": ..., "payload": <envelope>}` (decided per file), and the literal
`null` (a tombstone) right after every delete.

`customers` and `orders` come from a PostgreSQL connector (server "shop"). They
share one write-ahead log, so `source.lsn` strictly increases in commit order
across both tables; changes of one transaction share `source.txId`. The tables
run with REPLICA IDENTITY FULL, so updates and deletes carry the full before
image. `order_items` comes from a MySQL connector (server "fulfilment"); its
position is (`source.file`, `source.pos`, `source.row`): the binlog file rolls
over every `binlog_events_per_file` events and `pos` restarts, `row` numbers the
rows of one multi-row binlog event. `source_position()` turns either into a
sortable tuple.

What the files do to a consumer, on purpose:

- The first generated day starts with an initial snapshot: op "r" for every
  existing row, as the real connectors send it: every PostgreSQL snapshot row
  carries the same `lsn` and `txId` (`source.snapshot` "first", "true"...,
  "last"), every MySQL one the same binlog `file`, `pos` and `row` 0. A
  position alone does not identify a change: (table, key, position, op) does.
- PostgreSQL changes carry `source.sequence` (`["<last commit LSN>","<LSN>"]`,
  the first null for the first transaction streamed), and a primary-key
  update's delete and create share one LSN, as pgoutput sends them.
- Inserts ("c"), updates ("u") and deletes ("d", each followed by a tombstone).
  A few times a day a customer's key changes; Debezium emits a delete of the old
  key, its tombstone and a create of the new key, in one transaction, followed
  by the cascaded updates of that customer's orders.
- Lines are not in commit order: a day's changes are shuffled across its files
  and a share (`late_share`) lands in the next day's folder (its envelope
  `ts_ms`, the processing time, is then after midnight). Changes of the last
  generated day, or of a day whose next calendar day is not generated, stay in
  their own folder.
- The envelope `ts_ms` lags the commit by a jittered amount, sometimes by a
  lot, so ordering by it is wrong for some changes; only the source position
  gives the true order.
- A share of changes (`duplicate_rate`) is delivered a second time with an
  identical envelope in a later file of the same folder (later in the same file
  when it already sits in the last one), with its tombstone if it is a delete.
  The line follows the target file's form, bare or wrapped.
- Malformed lines (`malformed_rate`, kinds in `MALFORMED_KINDS`) are EXTRA,
  corrupted copies of a real change: the intact change is still delivered once,
  so the true state only reflects well-formed changes. A corrupted copy of a
  delete has no tombstone.
- Schema drift: from `drift_day` on, `customers` carries `loyalty_tier` (added
  with default "bronze"); before and after images from that day on have it,
  earlier ones do not, and so does the schema of wrapped records.

A landed file is never written again. Into an empty landing zone the files are a
pure function of the arguments; today's changes are those committed until a few
minutes ago, a prefix of the whole day's. A later run continues the same history:
it simulates from the first day the zone holds changes of (so positions never
clash), and writes only the changes no landed file holds yet (by table, key,
position and op), in a day folder that already has files as one new file named
after the generation time. So a second run on the same day adds the changes
committed since, and a run on the next day adds the rest of yesterday.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from pathlib import Path

from lakehouse_assets.project import load_project

from .events_generator import LANDED_SUFFIXES, PRODUCTS, STAMP, elapsed_seconds

# The captured tables as the shop's declaration has them; the generator writes what they would send.
CDC_TABLES = load_project(Path(__file__).with_name("lakehouse.yaml")).cdc
ORDER_STATUSES = ("pending", "paid", "shipped", "delivered", "cancelled")
# A column the customers table gains upstream half way through (schema drift).
DRIFT_COLUMNS = {"customers": {"loyalty_tier": "string"}}

DEBEZIUM_VERSION = "2.7.0.Final"
MAX_RECORD_BYTES = 64 * 1024  # a consumer's line limit; oversized copies exceed it
LOYALTY_TIERS = ("bronze", "silver", "gold")

# The ways a line can be broken, and how often relative to each other.
MALFORMED_KINDS = {
    "truncated_json": 3,
    "unknown_op": 2,
    "missing_op": 2,
    "missing_position": 2,
    "after_not_object": 2,
    "bad_key_type": 2,
    "oversized": 1,
}

FIRST_NAMES = ("Anna", "Ben", "Chloe", "David", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas",
               "Katya", "Luca", "Mira", "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sven", "Tara")
LAST_NAMES = ("Berg", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Hansen", "Ivanova",
              "Jansen", "Kowalski", "Larsen", "Moreau", "Novak", "Okafor", "Rossi", "Schmidt")
COUNTRIES = ("DE", "FR", "NL", "GB", "US", "ES", "IT", "PL", "SE", "AT")
EMAIL_DOMAINS = ("example.com", "example.org", "mail.example.net")


# A string column per table that an oversized copy pads.
_PAD_COLUMN = {"customers": "full_name", "orders": "status", "order_items": "product_id"}


def binlog_file(index: int) -> str:
    return f"mysql-bin.{index:06d}"


def binlog_index(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


def source_position(source: dict, op: str) -> tuple[int, ...]:
    """The sortable commit-order position of a change, as the platform defines it.

    PostgreSQL: a snapshot row at (lsn, 0); a streamed change at (last commit LSN
    from `sequence`, or its own LSN when that is null; lsn). MySQL: (binlog index, pos, row).
    """
    if source["connector"] == "mysql":
        return (binlog_index(source["file"]), source["pos"], source["row"])
    if op == "r":
        return (source["lsn"], 0)
    last_commit = json.loads(source.get("sequence") or "[null]")[0]
    return (int(last_commit) if last_commit is not None else source["lsn"], source["lsn"])


def cdc_folder(landing: Path, table: str, day: dt.date) -> Path:
    return landing / "cdc" / table / f"date={day.isoformat()}"


@dataclass
class CdcChange:
    """One emitted change, exactly as its envelope says."""

    table: str
    op: str  # "r", "c", "u" or "d"
    before: dict | None
    after: dict | None
    source: dict
    ts_ms: int  # when the connector processed it
    commit_day: dt.date
    late: bool = False  # lands in the next day's folder

    @property
    def position(self) -> tuple[int, ...]:
        return source_position(self.source, self.op)

    @property
    def key(self) -> tuple:
        image = self.before if self.op == "d" else self.after
        return tuple(image[c] for c in CDC_TABLES[self.table].primary_key)

    def envelope(self) -> dict:
        return {"before": self.before, "after": self.after, "source": self.source,
                "op": self.op, "ts_ms": self.ts_ms}


@dataclass
class GeneratedCdcDay:
    table: str
    day: dt.date
    files: list[Path] = field(default_factory=list)
    lines: int = 0
    changes: int = 0  # distinct well-formed changes in this folder (late ones from the day before included)
    tombstones: int = 0  # `null` lines, one after each delivered delete (duplicates included)
    duplicates: int = 0  # extra deliveries of a change already in this folder
    malformed: Counter = field(default_factory=Counter)
    late: int = 0  # changes committed the day before that landed here


@dataclass
class CdcGeneration:
    days: list[GeneratedCdcDay]
    # Every change in the order it was generated; within a database, commit order.
    history: list[CdcChange]
    # Final state per table: key tuple -> row, exactly as last emitted in `after`.
    true_state: dict[str, dict[tuple, dict]]

    def day(self, table: str, day: dt.date) -> GeneratedCdcDay:
        return next(d for d in self.days if d.table == table and d.day == day)

    def state_as_of(self, table: str, position: tuple[int, ...]) -> dict[tuple, dict]:
        """The table after every change at or before `position` (see `source_position`)."""
        return _replay(c for c in self.history if c.table == table and c.position <= position)


def _replay(changes) -> dict[tuple, dict]:
    state: dict[tuple, dict] = {}
    for change in sorted(changes, key=lambda c: c.position):
        if change.op == "d":
            state.pop(change.key, None)
        else:
            state[change.key] = change.after
    return state


# --- what an earlier run landed ---------------------------------------------------

def _landed_days(landing: Path) -> list[dt.date]:
    """The day folders of any captured table that hold files, oldest first."""
    days = set()
    for table in CDC_TABLES:
        for path in (landing / "cdc" / table).glob("date=*/*"):
            if path.name.endswith(LANDED_SUFFIXES):
                try:
                    days.add(dt.date.fromisoformat(path.parent.name.removeprefix("date=")))
                except ValueError:  # not a day folder: nothing this generator wrote
                    continue
    return sorted(days)


def _identity(table: str, envelope: dict) -> tuple:
    """What identifies a change across deliveries: its op, position and key (snapshot rows share a position)."""
    op = envelope["op"]
    image = envelope["before"] if op == "d" else envelope["after"]
    key = tuple(image[c] for c in CDC_TABLES[table].primary_key)
    return op, source_position(envelope["source"], op), key


def _landed_changes(table: str, paths: Iterable[Path]) -> set[tuple]:
    """The identities of the well-formed changes the files hold (tombstones and broken lines hold none)."""
    found = set()
    for path in paths:
        if not path.name.endswith(LANDED_SUFFIXES):
            continue
        data = path.read_bytes()
        text = gzip.decompress(data) if path.name.endswith(".gz") else data
        for line in text.decode("utf-8", "replace").splitlines():
            try:
                doc = json.loads(line)
                envelope = doc["payload"] if "payload" in doc and "schema" in doc else doc
                found.add(_identity(table, envelope))
            except (ValueError, TypeError, KeyError, AttributeError, IndexError):
                continue
    return found


def _free_name(folder: Path, stem: str) -> Path:
    """`<stem>.jsonl` in `folder`, or `<stem>-N.jsonl` when a file has that name: never one that exists."""
    path, n = folder / f"{stem}.jsonl", 1
    while path.exists():
        path, n = folder / f"{stem}-{n}.jsonl", n + 1
    return path


def _day_start_us(day: dt.date) -> int:
    return int(dt.datetime.combine(day, dt.time(), dt.timezone.utc).timestamp()) * 1_000_000


def _iso(us: int) -> str:
    """Debezium's ZonedTimestamp: UTC with microseconds and `Z`."""
    ts = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=us)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _money(value: Decimal) -> str:
    return f"{value:.2f}"


def _sequence(last_commit: str | None, lsn: int) -> str:
    """`source.sequence` as the connector writes it (Jackson's JSON, no spaces): `["<last commit>","<lsn>"]`."""
    return json.dumps([last_commit, str(lsn)], separators=(",", ":"))


class _Shop:
    """Both databases, their logs and the changes they emit."""

    def __init__(self, seed: int, first_day: dt.date, customers: int, initial_orders: int,
                 binlog_events_per_file: int, drift_day: dt.date | None, now: dt.datetime) -> None:
        self.seed = seed
        self.now = now  # a day under way is simulated until then
        self.drift_day = drift_day
        self.binlog_events_per_file = binlog_events_per_file
        prices = random.Random(f"{seed}-cdc-prices")
        self.prices = {p: Decimal(prices.randint(199, 24_999)) / 100 for p in PRODUCTS}

        self.customers: dict[int, dict] = {}
        self.orders: dict[int, dict] = {}
        self.items: dict[tuple[int, int], dict] = {}
        self.lines_of: dict[int, list[int]] = {}
        self.drifted = False
        self.history: list[CdcChange] = []

        # Log positions and commit clocks, one per database.
        self.lsn = 24_000_000 + random.Random(f"{seed}-cdc-lsn").randrange(1_000_000)
        self.last_commit_lsn: int | None = None  # null until a transaction was streamed
        self.tx_id = 760
        self.binlog = 3
        self.pos = 4
        self.events_in_file = 0
        self.pg_clock = 0
        self.my_clock = 0

        # Set per day by `run_day`.
        self.rng = random.Random()
        self.net = random.Random()
        self.day = first_day
        self.late_share = 0.0
        self.next_day_generated = False
        self._seed_tables(random.Random(f"{seed}-cdc-initial"), first_day, customers, initial_orders)

    # --- rows -------------------------------------------------------------

    def _person(self, rng: random.Random, customer_id: int) -> tuple[str, str]:
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        email = f"{first}.{last}.{customer_id}@{rng.choice(EMAIL_DOMAINS)}".lower()
        return email, f"{first} {last}"

    def _customer_row(self, rng: random.Random, customer_id: int, created_us: int) -> dict:
        email, name = self._person(rng, customer_id)
        row = {"customer_id": customer_id, "email": email, "full_name": name,
               "country": rng.choice(COUNTRIES), "created_at": _iso(created_us), "updated_at": _iso(created_us)}
        if self.drifted:
            row["loyalty_tier"] = rng.choices(LOYALTY_TIERS, (8, 2, 1))[0]
        return row

    def _order_rows(self, rng: random.Random, order_id: int, customer_id: int, status: str,
                   created_us: int) -> tuple[dict, list[dict]]:
        items = []
        for line_no in range(1, rng.randint(1, 4) + 1):
            product = rng.choice(PRODUCTS)
            items.append({"order_id": order_id, "line_no": line_no, "product_id": product,
                          "quantity": rng.randint(1, 3), "unit_price": _money(self.prices[product])})
        order = {"order_id": order_id, "customer_id": customer_id, "status": status,
                 "total": _money(sum((Decimal(i["unit_price"]) * i["quantity"] for i in items), Decimal(0))),
                 "order_ts": _iso(created_us), "updated_at": _iso(created_us)}
        return order, items

    def _seed_tables(self, rng: random.Random, first_day: dt.date, customers: int, orders: int) -> None:
        start = _day_start_us(first_day)
        if self.drift_day is not None and self.drift_day <= first_day:
            self.drifted = True
        for customer_id in range(1, customers + 1):
            created = start - rng.randrange(1, 400 * 86_400) * 1_000_000 - rng.randrange(1_000_000)
            row = self._customer_row(rng, customer_id, created)
            if rng.random() < 0.3:  # some were edited since they signed up
                row["updated_at"] = _iso(rng.randrange(created, start))
            self.customers[customer_id] = row
        self.next_customer_id = customers + 1
        for order_id in range(1, orders + 1):
            created = start - rng.randrange(1, 30 * 86_400) * 1_000_000 - rng.randrange(1_000_000)
            status = rng.choices(ORDER_STATUSES, (2, 2, 3, 8, 1))[0]
            order, items = self._order_rows(rng, order_id, rng.choice(list(self.customers)), status, created)
            if status != "pending":
                order["updated_at"] = _iso(rng.randrange(created, start))
            self._put_order(order, items)
        self.next_order_id = orders + 1

    def _put_order(self, order: dict, items: list[dict]) -> None:
        self.orders[order["order_id"]] = order
        self.lines_of[order["order_id"]] = [i["line_no"] for i in items]
        for item in items:
            self.items[(item["order_id"], item["line_no"])] = item

    # --- logs ---------------------------------------------------------------

    def _processed_ms(self, commit_ms: int) -> int:
        """When the connector handled a change: a jittered lag, now and then a long one."""
        if self.next_day_generated and self.net.random() < self.late_share:
            return _day_start_us(self.day + dt.timedelta(days=1)) // 1000 + self.net.randint(200, 1_800_000)
        if self.net.random() < 0.1:
            return commit_ms + self.net.randint(1_000, 90_000)
        return commit_ms + self.net.randint(3, 900)

    def _emit(self, table: str, op: str, before: dict | None, after: dict | None, source: dict,
              ts_ms: int | None = None) -> None:
        ts = self._processed_ms(source["ts_ms"]) if ts_ms is None else ts_ms
        late = ts >= _day_start_us(self.day + dt.timedelta(days=1)) // 1000
        self.history.append(CdcChange(table, op, before, after, source, ts, self.day, late))

    def _pg_commit(self, at_us: int) -> int:
        self.pg_clock = max(at_us, self.pg_clock + 1_000)
        self.tx_id += self.rng.randint(1, 3)
        return self.pg_clock

    def _pg_emit(self, commit_us: int, changes: list[tuple[str, str, dict | None, dict | None]],
                 key_change: bool = False) -> int:
        """One transaction; with `key_change` its first two changes (delete, create) share one LSN."""
        for n, (table, op, before, after) in enumerate(changes):
            if not (key_change and n == 1):
                self.lsn += self.rng.randint(56, 480)
            last = None if self.last_commit_lsn is None else str(self.last_commit_lsn)
            source = {"version": DEBEZIUM_VERSION, "connector": "postgresql", "name": "shop", "db": "shop",
                      "schema": "public", "table": table, "ts_ms": commit_us // 1000, "snapshot": "false",
                      "txId": self.tx_id, "lsn": self.lsn, "sequence": _sequence(last, self.lsn)}
            self._emit(table, op, before, after, source)
        self.lsn += self.rng.randint(40, 120)  # the commit record
        self.last_commit_lsn = self.lsn
        return len(changes)

    def _my_commit(self, at_us: int) -> int:
        self.my_clock = max(at_us, self.my_clock + 1_000)
        return self.my_clock

    def _my_event(self, commit_us: int, op: str, rows: list[tuple[dict | None, dict | None]]) -> int:
        """One binlog rows event; its rows share file and pos and are numbered by `row`."""
        if self.events_in_file >= self.binlog_events_per_file:
            self.binlog, self.pos, self.events_in_file = self.binlog + 1, 4, 0
        self.events_in_file += 1
        self.pos += self.rng.randint(90, 640)
        for row, (before, after) in enumerate(rows):
            source = {"version": DEBEZIUM_VERSION, "connector": "mysql", "name": "fulfilment",
                      "db": "fulfilment", "table": "order_items", "ts_ms": commit_us // 1000,
                      "snapshot": "false", "file": binlog_file(self.binlog), "pos": self.pos, "row": row}
            self._emit("order_items", op, before, after, source)
        self.pos += 40 * len(rows)  # the rows take room in the event
        return len(rows)

    # --- a day ---------------------------------------------------------------

    def snapshot(self) -> int:
        start_ms = self.pg_clock // 1000
        self.tx_id += 1
        rows = [("customers", r) for r in self.customers.values()] + [("orders", r) for r in self.orders.values()]
        self.lsn += self.rng.randint(56, 480)  # the slot's consistent point: every snapshot row carries it
        for n, (table, row) in enumerate(rows):
            read_ms = start_ms + n // 40  # rows are read in batches
            marker = "first" if n == 0 else "last" if n == len(rows) - 1 else "true"
            source = {"version": DEBEZIUM_VERSION, "connector": "postgresql", "name": "shop", "db": "shop",
                      "schema": "public", "table": table, "ts_ms": read_ms, "snapshot": marker,
                      "txId": self.tx_id, "lsn": self.lsn, "sequence": _sequence(None, self.lsn)}
            self._emit(table, "r", None, dict(row), source)
        self.pg_clock = (start_ms + len(rows) // 40 + 1) * 1000
        self.events_in_file += 1
        self.pos += self.rng.randint(90, 640)
        for n, item in enumerate(self.items.values()):
            source = {"version": DEBEZIUM_VERSION, "connector": "mysql", "name": "fulfilment",
                      "db": "fulfilment", "table": "order_items", "ts_ms": start_ms + n // 40,
                      "snapshot": "first" if n == 0 else "true", "file": binlog_file(self.binlog), "pos": self.pos,
                      "row": 0}
            self._emit("order_items", "r", None, dict(item), source)
        self.my_clock = (start_ms + len(self.items) // 40 + 1) * 1000
        return len(rows) + len(self.items)

    def run_day(self, day: dt.date, changes: int, late_share: float, next_day_generated: bool,
                first: bool) -> None:
        self.rng = random.Random(f"{self.seed}-cdc-{day.isoformat()}")
        self.net = random.Random(f"{self.seed}-cdc-{day.isoformat()}-delivery")
        self.day, self.late_share, self.next_day_generated = day, late_share, next_day_generated
        start = _day_start_us(day)
        self.pg_clock = max(self.pg_clock, start)
        self.my_clock = max(self.my_clock, start)
        if self.drift_day is not None and self.drift_day <= day and not self.drifted:
            # ALTER TABLE ... ADD COLUMN loyalty_tier DEFAULT 'bronze': no change events.
            self.drifted = True
            for row in self.customers.values():
                row["loyalty_tier"] = "bronze"
        if first:
            self.pg_clock += 500_000
            self.snapshot()

        # Key changes happen a few times a day at random points.
        key_changes = sorted(self.rng.uniform(0, changes) for _ in range(self.rng.randint(2, 4)))
        actions: list[tuple[Callable[[int], int], int]] = [
            (self._new_customer, 12), (self._update_customer, 18), (self._delete_customer, 3),
            (self._new_order, 25), (self._advance_order, 30), (self._purge_order, 3), (self._change_quantity, 5),
        ]
        handlers, weights = zip(*actions)
        # The day is cut into one slot per change; margins keep lagged processing inside it. A day under way
        # stops a few minutes before now: its changes are a prefix of the whole day's, so a later run that
        # simulates the day again finds the ones landed before, and adds those committed since.
        slot = (86_400 - 300) * 1_000_000 / changes
        elapsed = elapsed_seconds(day, self.now)
        cutoff = start + (elapsed - 300) * 1_000_000 if elapsed < 86_400 else None
        done = 0
        while done < changes:
            at = start + 60_000_000 + int(done * slot + self.rng.uniform(0, slot))
            if cutoff is not None and at > cutoff:
                break
            if key_changes and done >= key_changes[0]:
                key_changes.pop(0)
                done += self._change_customer_key(at)
            else:
                done += self.rng.choices(handlers, weights)[0](at)

    # --- transactions: each returns how many changes it emitted ---------------

    def _new_customer(self, at: int) -> int:
        commit = self._pg_commit(at)
        customer_id = self.next_customer_id
        self.next_customer_id += 1
        row = self._customer_row(self.rng, customer_id, commit)
        self.customers[customer_id] = row
        return self._pg_emit(commit, [("customers", "c", None, dict(row))])

    def _update_customer(self, at: int) -> int:
        commit = self._pg_commit(at)
        before = self.customers[self.rng.choice(list(self.customers))]
        after = dict(before)
        what = self.rng.choice(("email", "full_name", "country") + (("loyalty_tier",) * 2 if self.drifted else ()))
        if what == "email":
            after["email"] = f"{before['full_name'].replace(' ', '.')}.{self.rng.randrange(1000)}@" \
                             f"{self.rng.choice(EMAIL_DOMAINS)}".lower()
        elif what == "full_name":
            after["full_name"] = f"{before['full_name'].split(' ')[0]} {self.rng.choice(LAST_NAMES)}"
        elif what == "country":
            after["country"] = self.rng.choice(COUNTRIES)
        else:
            after["loyalty_tier"] = self.rng.choice(LOYALTY_TIERS)
        after["updated_at"] = _iso(commit)
        self.customers[after["customer_id"]] = after
        return self._pg_emit(commit, [("customers", "u", dict(before), dict(after))])

    def _delete_customer(self, at: int) -> int:
        # Only customers without orders: the foreign key forbids the rest.
        with_orders = {o["customer_id"] for o in self.orders.values()}
        candidates = [c for c in self.customers if c not in with_orders]
        if not candidates:
            return 0
        commit = self._pg_commit(at)
        before = self.customers.pop(self.rng.choice(candidates))
        return self._pg_emit(commit, [("customers", "d", dict(before), None)])

    def _change_customer_key(self, at: int) -> int:
        """UPDATE customers SET customer_id = ...: delete + create, then the cascaded order updates."""
        commit = self._pg_commit(at)
        before = self.customers.pop(self.rng.choice(list(self.customers)))
        new_id = self.next_customer_id
        self.next_customer_id += 1
        after = dict(before, customer_id=new_id, updated_at=_iso(commit))
        self.customers[new_id] = after
        changes = [("customers", "d", dict(before), None), ("customers", "c", None, dict(after))]
        for order_id, order in self.orders.items():
            if order["customer_id"] == before["customer_id"]:
                moved = dict(order, customer_id=new_id)  # ON UPDATE CASCADE leaves updated_at alone
                changes.append(("orders", "u", dict(order), dict(moved)))
                self.orders[order_id] = moved
        return self._pg_emit(commit, changes, key_change=True)

    def _new_order(self, at: int) -> int:
        commit = self._pg_commit(at)
        order_id = self.next_order_id
        self.next_order_id += 1
        order, items = self._order_rows(self.rng, order_id, self.rng.choice(list(self.customers)), "pending", commit)
        self._put_order(order, items)
        n = self._pg_emit(commit, [("orders", "c", None, dict(order))])
        # The fulfilment service writes the lines to its own database moments later.
        my_commit = self._my_commit(commit + self.rng.randint(50_000, 2_500_000))
        return n + self._my_event(my_commit, "c", [(None, dict(i)) for i in items])

    def _advance_order(self, at: int) -> int:
        open_orders = [o for o, row in self.orders.items() if row["status"] in ("pending", "paid", "shipped")]
        if not open_orders:
            return 0
        commit = self._pg_commit(at)
        before = self.orders[self.rng.choice(open_orders)]
        nxt = {"pending": ("paid", "cancelled"), "paid": ("shipped", "cancelled"), "shipped": ("delivered",)}
        options = nxt[before["status"]]
        status = options[0] if len(options) == 1 or self.rng.random() < 0.85 else options[1]
        after = dict(before, status=status, updated_at=_iso(commit))
        self.orders[after["order_id"]] = after
        return self._pg_emit(commit, [("orders", "u", dict(before), dict(after))])

    def _purge_order(self, at: int) -> int:
        cancelled = [o for o, row in self.orders.items() if row["status"] == "cancelled"]
        if not cancelled:
            return 0
        commit = self._pg_commit(at)
        order_id = self.rng.choice(cancelled)
        before = self.orders.pop(order_id)
        n = self._pg_emit(commit, [("orders", "d", dict(before), None)])
        items = [self.items.pop((order_id, line)) for line in self.lines_of.pop(order_id)]
        my_commit = self._my_commit(commit + self.rng.randint(50_000, 2_500_000))
        return n + self._my_event(my_commit, "d", [(dict(i), None) for i in items])

    def _change_quantity(self, at: int) -> int:
        pending = [o for o, row in self.orders.items() if row["status"] == "pending"]
        if not pending:
            return 0
        order_id = self.rng.choice(pending)
        line = self.rng.choice(self.lines_of[order_id])
        before = self.items[(order_id, line)]
        quantity = self.rng.choice([q for q in range(1, 6) if q != before["quantity"]])
        after = dict(before, quantity=quantity)
        self.items[(order_id, line)] = after
        n = self._my_event(self._my_commit(at), "u", [(dict(before), dict(after))])
        # The shop recomputes the order total once fulfilment confirms.
        commit = self._pg_commit(self.my_clock + self.rng.randint(50_000, 2_500_000))
        old = self.orders[order_id]
        total = sum((Decimal(self.items[(order_id, ln)]["unit_price"]) * self.items[(order_id, ln)]["quantity"]
                     for ln in self.lines_of[order_id]), Decimal(0))
        new = dict(old, total=_money(total), updated_at=_iso(commit))
        self.orders[order_id] = new
        return n + self._pg_emit(commit, [("orders", "u", dict(old), dict(new))])


# --- Debezium schemas for wrapped records ------------------------------------

_CONNECT_TYPES = {"long": "int64", "int": "int32", "string": "string", "decimal(12,2)": "string"}


def _column_schema(name: str, type_name: str, optional: bool) -> dict:
    if type_name == "timestamp":
        return {"type": "string", "optional": optional, "name": "io.debezium.time.ZonedTimestamp",
                "version": 1, "field": name}
    return {"type": _CONNECT_TYPES[type_name], "optional": optional, "field": name}


@cache
def _envelope_schema(table: str, drifted: bool) -> str:
    """The JsonConverter schema of a table's envelope, serialised once."""
    info = CDC_TABLES[table]
    columns = dict(info.columns, **(DRIFT_COLUMNS.get(table, {}) if drifted else {}))
    value = f"{info.topic}.Value"
    row_fields = [_column_schema(c, t, c not in info.primary_key) for c, t in columns.items()]
    source_fields = [
        {"type": "string", "optional": False, "field": "version"},
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "string", "optional": False, "field": "name"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
         "parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,"
                                  "incremental"}, "default": "false", "field": "snapshot"},
        {"type": "string", "optional": False, "field": "db"},
    ]
    if info.connector == "postgresql":
        source_fields += [{"type": "string", "optional": False, "field": "schema"},
                          {"type": "string", "optional": False, "field": "table"},
                          {"type": "string", "optional": True, "field": "sequence"},
                          {"type": "int64", "optional": True, "field": "txId"},
                          {"type": "int64", "optional": True, "field": "lsn"}]
        source_name = "io.debezium.connector.postgresql.Source"
    else:
        source_fields += [{"type": "string", "optional": True, "field": "table"},
                          {"type": "string", "optional": False, "field": "file"},
                          {"type": "int64", "optional": False, "field": "pos"},
                          {"type": "int32", "optional": False, "field": "row"}]
        source_name = "io.debezium.connector.mysql.Source"
    schema = {
        "type": "struct",
        "fields": [
            {"type": "struct", "fields": row_fields, "optional": True, "name": value, "field": "before"},
            {"type": "struct", "fields": row_fields, "optional": True, "name": value, "field": "after"},
            {"type": "struct", "fields": source_fields, "optional": False, "name": source_name, "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
        "optional": False,
        "name": f"{info.topic}.Envelope",
        "version": 1,
    }
    return json.dumps(schema, separators=(",", ":"))


def _render(envelope: dict, wrapped: bool, change: CdcChange) -> str:
    payload = json.dumps(envelope, separators=(",", ":"))
    if not wrapped:
        return payload
    image = change.after if change.after is not None else change.before
    schema = _envelope_schema(change.table, "loyalty_tier" in (image or {}))
    return f'{{"schema":{schema},"payload":{payload}}}'


def _break(rng: random.Random, change: CdcChange, kind: str, wrapped: bool) -> str:
    bad = json.loads(json.dumps(change.envelope()))
    image = "after" if bad["after"] is not None else "before"
    if kind == "truncated_json":
        text = _render(bad, wrapped, change)
        return text[: rng.randint(10, len(text) - 5)]
    if kind == "unknown_op":
        bad["op"] = rng.choice(["x", "upsert", "?"])
    elif kind == "missing_op":
        del bad["op"]
    elif kind == "missing_position":
        del bad["source"]["pos" if change.table == "order_items" else "lsn"]
    elif kind == "after_not_object":
        bad["after"] = json.dumps(bad[image], separators=(",", ":"))
    elif kind == "bad_key_type":
        bad[image][CDC_TABLES[change.table].primary_key[0]] = rng.choice(["abc", "n/a"])
    elif kind == "oversized":
        column = _PAD_COLUMN[change.table]
        bad[image][column] = f"{bad[image][column]} " + "x" * (MAX_RECORD_BYTES + rng.randint(1, 8_192))
    return _render(bad, wrapped, change)


def _write_folder(folder: Path, table: str, day: dt.date, deliveries: list[CdcChange], rng: random.Random,
                  files_per_day: int, wrapped_share: float, duplicate_rate: float,
                  malformed_rate: float, stamp: str) -> GeneratedCdcDay:
    """Write the folder's deliveries: `changes-NN.jsonl` into an empty folder, else one new file
    `changes-<stamp>.jsonl`; files already there stay as they are."""
    folder.mkdir(parents=True, exist_ok=True)
    landed = any(p.name.endswith(LANDED_SUFFIXES) for p in folder.iterdir())
    result = GeneratedCdcDay(table=table, day=day, changes=len(deliveries),
                             late=sum(c.commit_day < day for c in deliveries))
    if not deliveries:
        return result

    deliveries = list(deliveries)
    rng.shuffle(deliveries)
    n_files = 1 if landed else min(files_per_day, len(deliveries))
    wrapped = [rng.random() < wrapped_share for _ in range(n_files)]
    # Each file is a list of (sort key, seq, what, change, malformed kind); extras get random keys.
    files: list[list[tuple[float, int, str, CdcChange, str]]] = [[] for _ in range(n_files)]
    for i, change in enumerate(deliveries):  # contiguous runs of the shuffled list keep files even
        target = files[i * n_files // len(deliveries)]
        target.append((float(len(target)), i, "change", change, ""))
    kinds, weights = zip(*MALFORMED_KINDS.items())
    seq = len(deliveries)
    for n in range(n_files):
        for key, _, what, change, _ in list(files[n]):
            if what != "change":
                continue
            if rng.random() < duplicate_rate:  # at-least-once: sent again after a restart
                target = rng.randrange(n + 1, n_files) if n + 1 < n_files else n
                at = rng.uniform(key, len(files[n])) if target == n else rng.uniform(0, len(files[target]))
                files[target].append((at, seq, "duplicate", change, ""))
                seq += 1
            if rng.random() < malformed_rate:
                target = rng.randrange(n_files)
                files[target].append((rng.uniform(0, len(files[target])), seq, "malformed", change,
                                      rng.choices(kinds, weights)[0]))
                seq += 1

    for n, units in enumerate(files):
        lines: list[str] = []
        for _, _, what, change, kind in sorted(units, key=lambda u: (u[0], u[1])):
            if what == "malformed":
                lines.append(_break(rng, change, kind, wrapped[n]))
                result.malformed[kind] += 1
                continue
            lines.append(_render(change.envelope(), wrapped[n], change))
            result.duplicates += what == "duplicate"
            if change.op == "d":  # Debezium's tombstone, so compaction can drop the key
                lines.append("null")
                result.tombstones += 1
        path = _free_name(folder, f"changes-{stamp}") if landed else folder / f"changes-{n:02d}.jsonl"
        # Written beside its name and renamed: a reader listing the folder never sees half a file.
        part = path.with_name(f".{path.name}.part")
        with part.open("w", encoding="utf-8", newline="\n") as out:
            out.write("\n".join(lines) + "\n")
        part.rename(path)
        result.files.append(path)
        result.lines += len(lines)
    return result


def generate_cdc(
    landing: Path,
    days: list[dt.date],
    changes_per_day: int = 300,
    seed: int = 11,
    *,
    files_per_day: int = 3,
    wrapped_share: float = 0.5,
    late_share: float = 0.03,
    duplicate_rate: float = 0.02,
    malformed_rate: float = 0.005,
    drift_day: dt.date | None = None,
    customers: int = 200,
    initial_orders: int = 150,
    binlog_events_per_file: int = 100,
    now: dt.datetime | None = None,
) -> CdcGeneration:
    """Simulate the shop over `days` and write every table's change files for them.

    `changes_per_day` counts the changes committed each day over all three
    tables (the initial snapshot of the first day comes on top); a day under
    way at `now` (default: the clock's) has those committed until a few minutes
    before. The first of the (sorted) days starts with the snapshot; state
    carries over from day to day, so a day's files depend on the days before it
    in the same call. When the landing zone already holds changes, the days it
    holds them for are simulated too (the history goes on from its first day)
    and only changes no landed file holds are written (see the module's docstring).
    """
    days = sorted(set(days))
    if not days:
        return CdcGeneration(days=[], history=[], true_state={t: {} for t in CDC_TABLES})
    landed_days = _landed_days(landing)
    _refuse_a_day_inside(landing, days, landed_days)
    simulated = sorted(set(days) | set(landed_days))
    now = now or dt.datetime.now(dt.timezone.utc)
    shop = _Shop(seed, simulated[0], customers, initial_orders, binlog_events_per_file, drift_day, now)
    per_day: dict[dt.date, list[CdcChange]] = {}
    for n, day in enumerate(simulated):
        first = len(shop.history)
        shop.run_day(day, changes_per_day, late_share, day + dt.timedelta(days=1) in simulated, first=n == 0)
        per_day[day] = shop.history[first:]

    stamp = now.strftime(STAMP)
    results = []
    for table in CDC_TABLES:
        taken = _landed_changes(table, (landing / "cdc" / table).glob("date=*/*")) if landed_days else set()
        for day in days:
            rng = random.Random(f"{seed}-cdc-{table}-{day.isoformat()}-files")
            results.append(_write_folder(cdc_folder(landing, table, day), table, day,
                                         _new_changes(per_day, table, day, taken), rng,
                                         files_per_day, wrapped_share, duplicate_rate, malformed_rate, stamp))

    true_state = {t: _replay(c for c in shop.history if c.table == t) for t in CDC_TABLES}
    return CdcGeneration(days=results, history=shop.history, true_state=true_state)


def _refuse_a_day_inside(landing: Path, days: list[dt.date], landed_days: list[dt.date]) -> None:
    """A day before the landed history's last that it does not hold would start another history beside it."""
    inside = [d for d in days if landed_days and d < landed_days[-1] and d not in landed_days]
    if inside:
        raise ValueError(f"{landing / 'cdc'}: the landed change history runs from {landed_days[0]} to "
                         f"{landed_days[-1]}; changes of {inside[0]}, a day it does not hold, would make another "
                         "history whose positions clash with it: generate the days it holds or later ones, or into "
                         "an empty landing zone")


def _new_changes(per_day: dict[dt.date, list[CdcChange]], table: str, day: dt.date,
                 taken: set[tuple]) -> list[CdcChange]:
    """A table's changes that land on `day`: the day before's late ones, then the day's own, less those landed."""
    own = [c for c in per_day[day] if c.table == table and not c.late]
    arrived = [c for c in per_day.get(day - dt.timedelta(days=1), []) if c.table == table and c.late]
    return [c for c in arrived + own if _identity(c.table, c.envelope()) not in taken]
