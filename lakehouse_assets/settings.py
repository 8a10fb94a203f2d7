"""One settings object decides where everything lives: local laptop or cluster.

Every value comes from an environment variable with a local default, so the same
code runs with local Spark, a SQLite catalog and a folder warehouse, or against a
Spark cluster, a PostgreSQL catalog and an S3 warehouse, by configuration alone.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from .errors import ConfigurationError

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def validate_identifier(name: str, what: str = "identifier") -> str:
    """Names that end up in SQL text must be plain identifiers."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise ValueError(f"invalid {what} {name!r}: use letters, digits and underscores only")
    return name


def _redacted(uri: str) -> str:
    """A URI fit for an error message: its password replaced by `***`."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    return uri.replace(f":{parts.password}@", ":***@", 1)


@dataclass(frozen=True)
class CatalogUri:
    """A catalog database location, as both engines name it (a SQLAlchemy URL for pyiceberg, a JDBC URL for
    Spark).

    Accepts `sqlite:////abs/path/catalog.db` or
    `postgresql://user:password@host:port/database` (`postgresql+psycopg2://` too); or an Iceberg REST catalog,
    `rest+http://PRINCIPAL:TOKEN@host:port[/path]` (`rest+https://` too): its bearer token in the password's place
    (`lakehouse catalog token`), the principal only a name for messages.
    """

    kind: str  # "sqlite", "postgresql" or "rest"
    path: str = ""  # sqlite: absolute file path; rest: the API's path under host:port
    host: str = ""
    port: int = 5432
    database: str = ""
    user: str = ""
    password: str = field(default="", repr=False)
    scheme: str = ""  # rest: http or https

    @classmethod
    def parse(cls, uri: str) -> CatalogUri:
        parts = urlsplit(uri)
        scheme = parts.scheme.split("+", 1)[0]
        if scheme == "sqlite":
            path = uri.split(":///", 1)[1] if ":///" in uri else ""
            if not path.startswith("/"):
                raise ValueError(
                    f"catalog URI {uri!r}: a SQLite catalog needs an absolute path, "
                    "e.g. sqlite:////abs/path/catalog.db"
                )
            return cls(kind="sqlite", path=path)
        if scheme in ("postgresql", "postgres"):
            database = parts.path.lstrip("/")
            if not parts.hostname or not database:
                raise ValueError(
                    f"catalog URI {_redacted(uri)!r}: expected postgresql://user:password@host:port/database"
                )
            return cls(
                kind="postgresql",
                host=parts.hostname,
                port=parts.port or 5432,
                database=database,
                user=unquote(parts.username or ""),
                password=unquote(parts.password or ""),
            )
        if scheme == "rest" and parts.scheme.split("+", 1)[-1] in ("http", "https"):
            if not parts.hostname:
                raise ValueError(f"catalog URI {_redacted(uri)!r}: expected rest+http://PRINCIPAL:TOKEN@host:port")
            secure = parts.scheme.endswith("https")
            return cls(kind="rest", scheme="https" if secure else "http", host=parts.hostname,
                       port=parts.port or (443 if secure else 80), path=parts.path.rstrip("/"),
                       user=unquote(parts.username or ""), password=unquote(parts.password or ""))
        raise ValueError(
            f"unsupported catalog URI {_redacted(uri)!r}: use sqlite:////abs/path.db, postgresql://... or "
            "rest+http://PRINCIPAL:TOKEN@host:port"
        )

    @property
    def rest_url(self) -> str:
        """A REST catalog's base address, as its clients take it (`uri`)."""
        return f"{self.scheme}://{self.host}:{self.port}{self.path}"

    def _database(self, what: str) -> None:
        if self.kind == "rest":
            raise ValueError(f"{self.display} is a REST catalog: it has no {what} (the server keeps the catalog)")

    @property
    def sqlalchemy_url(self) -> str:
        self._database("SQLAlchemy URL")
        if self.kind == "sqlite":
            return f"sqlite:///{self.path}"
        auth = quote(self.user, safe="") + (f":{quote(self.password, safe='')}" if self.password else "")
        return f"postgresql+psycopg2://{auth}@{self.host}:{self.port}/{self.database}"

    @property
    def jdbc_url(self) -> str:
        self._database("JDBC URL")
        if self.kind == "sqlite":
            return f"jdbc:sqlite:{self.path}"
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.database}"

    @property
    def display(self) -> str:
        """The URI without its password, for logs and errors."""
        if self.kind == "sqlite":
            return f"sqlite:///{self.path}"
        if self.kind == "rest":
            return f"rest+{self.rest_url}" + (f" as {self.user}" if self.user else "")
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.database}"


def _port(name: str, value: str) -> int:
    if not value.strip().isdigit() or not 0 < int(value) < 65536:
        raise ValueError(f"{name} must be a TCP port (1-65535), not {value!r}")
    return int(value)


def _seconds(name: str, value: str) -> int:
    if not value.strip().isdigit():
        raise ValueError(f"{name} must be a whole number of seconds (0: no limit), not {value!r}")
    return int(value)


def _count(name: str, value: str) -> int:
    if not value.strip().isdigit() or int(value) > 2**31 - 1:
        raise ValueError(f"{name} must be a whole number of rows (0: none), not {value!r}")
    return int(value)


def _bootstrap_servers(name: str, value: str) -> str:
    """Kafka's bootstrap servers, `host:port` comma-separated, as clients take them (spaces dropped)."""
    servers = [server.strip() for server in value.split(",") if server.strip()]
    for server in servers:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{name}: {server!r} is not host:port (e.g. 127.0.0.1:9092; several comma-separated)")
    return ",".join(servers)


KAFKA_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
KAFKA_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _kafka_security(settings: Settings) -> None:
    """Check (and normalise: names upper-cased, the mechanism PLAIN unless set) how Kafka's clients connect and sign
    in. Credentials and a CA file the protocol would not use are refused rather than ignored; the password is never
    part of a message."""
    def put(name: str, value: str) -> None:
        object.__setattr__(settings, name, value)

    protocol = settings.kafka_security_protocol.strip().upper() or "PLAINTEXT"
    if protocol not in KAFKA_SECURITY_PROTOCOLS:
        raise ConfigurationError(f"LAKEHOUSE_KAFKA_SECURITY_PROTOCOL={settings.kafka_security_protocol!r}: expected "
                                 f"one of {', '.join(KAFKA_SECURITY_PROTOCOLS)}")
    put("kafka_security_protocol", protocol)
    sasl = protocol.startswith("SASL_")
    mechanism = settings.kafka_sasl_mechanism.strip().upper()
    if mechanism and mechanism not in KAFKA_SASL_MECHANISMS:
        raise ConfigurationError(f"LAKEHOUSE_KAFKA_SASL_MECHANISM={settings.kafka_sasl_mechanism!r}: expected one of "
                                 f"{', '.join(KAFKA_SASL_MECHANISMS)}")
    if sasl:
        put("kafka_sasl_mechanism", mechanism or "PLAIN")
        missing = [variable for variable, value in (("LAKEHOUSE_KAFKA_SASL_USERNAME", settings.kafka_sasl_username),
                                                    ("LAKEHOUSE_KAFKA_SASL_PASSWORD", settings.kafka_sasl_password))
                   if not value]
        if missing:
            raise ConfigurationError(f"LAKEHOUSE_KAFKA_SECURITY_PROTOCOL={protocol} signs in with a user name and a "
                                     f"password: set {' and '.join(missing)}")
    else:
        given = [variable for variable, value in (("LAKEHOUSE_KAFKA_SASL_MECHANISM", mechanism),
                                                  ("LAKEHOUSE_KAFKA_SASL_USERNAME", settings.kafka_sasl_username),
                                                  ("LAKEHOUSE_KAFKA_SASL_PASSWORD", settings.kafka_sasl_password))
                 if value]
        if given:
            raise ConfigurationError(f"{', '.join(given)} set, but LAKEHOUSE_KAFKA_SECURITY_PROTOCOL={protocol} does not "
                                     "sign in: use SASL_SSL (or SASL_PLAINTEXT), or unset them")
        put("kafka_sasl_mechanism", "")
    if settings.kafka_ssl_ca_file:
        if not protocol.endswith("SSL"):
            raise ConfigurationError(f"LAKEHOUSE_KAFKA_SSL_CA_FILE set, but LAKEHOUSE_KAFKA_SECURITY_PROTOCOL={protocol} "
                                     "does not use TLS: use SSL or SASL_SSL, or unset it")
        ca = Path(settings.kafka_ssl_ca_file).expanduser().resolve()
        if not ca.is_file():
            raise ConfigurationError(f"LAKEHOUSE_KAFKA_SSL_CA_FILE={settings.kafka_ssl_ca_file!r}: no such file (the "
                                     "PEM file of the certificate authority that signed the brokers' certificates)")
        put("kafka_ssl_ca_file", str(ca))


def _env(name: str, default: str) -> str:
    value = os.environ.get(name, "").strip()
    return value or default


# The settings the environment or a profile gives: field -> (variable, default).
ENV_SETTINGS = {
    "home": ("LAKEHOUSE_HOME", ".lakehouse"),
    "spark_master": ("LAKEHOUSE_SPARK_MASTER", "local[*]"),
    "driver_memory": ("LAKEHOUSE_DRIVER_MEMORY", "4g"),
    "shuffle_partitions": ("LAKEHOUSE_SHUFFLE_PARTITIONS", "4"),
    "catalog_name": ("LAKEHOUSE_CATALOG_NAME", "lakehouse"),
    "catalog_uri": ("LAKEHOUSE_CATALOG_URI", ""),
    "warehouse": ("LAKEHOUSE_WAREHOUSE", ""),
    "landing": ("LAKEHOUSE_LANDING", ""),
    "namespace": ("LAKEHOUSE_NAMESPACE", "lake"),
    "extra_jars": ("LAKEHOUSE_SPARK_JARS", ""),
    "spark_conf": ("LAKEHOUSE_SPARK_CONF", ""),
    "start_date": ("LAKEHOUSE_START_DATE", ""),
    "s3_endpoint": ("LAKEHOUSE_S3_ENDPOINT", ""),
    "s3_access_key": ("LAKEHOUSE_S3_ACCESS_KEY", ""),
    "s3_secret_key": ("LAKEHOUSE_S3_SECRET_KEY", ""),
    "s3_region": ("LAKEHOUSE_S3_REGION", "us-east-1"),
    "sql_s3_access_key": ("LAKEHOUSE_SQL_S3_ACCESS_KEY", ""),
    "sql_s3_secret_key": ("LAKEHOUSE_SQL_S3_SECRET_KEY", ""),
    "sql_raw": ("LAKEHOUSE_SQL_RAW", "0"),
    "pii_key": ("LAKEHOUSE_PII_KEY", ""),
    "alert_webhook": ("LAKEHOUSE_ALERT_WEBHOOK", ""),
    "jvm_archive": ("LAKEHOUSE_JVM_ARCHIVE", "1"),
    "jvm_jit": ("LAKEHOUSE_JVM_JIT", "auto"),
    "serve_host": ("LAKEHOUSE_SERVE_HOST", "127.0.0.1"),
    "serve_port": ("LAKEHOUSE_SERVE_PORT", "10000"),
    "serve_catalog_uri": ("LAKEHOUSE_SERVE_CATALOG_URI", ""),
    "serve_query_timeout": ("LAKEHOUSE_SERVE_QUERY_TIMEOUT", "600"),
    "serve_result_cache_rows": ("LAKEHOUSE_SERVE_RESULT_CACHE_ROWS", "10000"),
    "serve_result_cache_mb": ("LAKEHOUSE_SERVE_RESULT_CACHE_MB", "256"),
    "serve_refresh_every": ("LAKEHOUSE_SERVE_REFRESH_EVERY", "1"),
    "serve_refresh_idle": ("LAKEHOUSE_SERVE_REFRESH_IDLE", "900"),
    "serve_hold_rows": ("LAKEHOUSE_SERVE_HOLD_ROWS", "2000000"),
    "serve_executor_memory": ("LAKEHOUSE_SERVE_EXECUTOR_MEMORY", "2g"),
    "serve_os_user": ("LAKEHOUSE_SERVE_OS_USER", ""),
    "serve_max_rows": ("LAKEHOUSE_SERVE_MAX_ROWS", "1000000"),
    "kafka_bootstrap_servers": ("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS", ""),
    "kafka_security_protocol": ("LAKEHOUSE_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT"),
    "kafka_sasl_mechanism": ("LAKEHOUSE_KAFKA_SASL_MECHANISM", ""),
    "kafka_sasl_username": ("LAKEHOUSE_KAFKA_SASL_USERNAME", ""),
    "kafka_sasl_password": ("LAKEHOUSE_KAFKA_SASL_PASSWORD", ""),
    "kafka_ssl_ca_file": ("LAKEHOUSE_KAFKA_SSL_CA_FILE", ""),
}
PROFILE_KEYS = frozenset(variable for variable, _ in ENV_SETTINGS.values())
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


# A file in the home that records the declaration its lake was made from (`make demo` writes it); that
# declaration is used when LAKEHOUSE_PROJECT is unset.
PROJECT_RECORD = "project"


def project_file(home: str | Path | None = None) -> tuple[str, str]:
    """The project's declaration, and where that came from: `LAKEHOUSE_PROJECT`; else the one recorded in the
    home's `project` file (the home given, else `LAKEHOUSE_HOME`, default `./.lakehouse`); else `./lakehouse.yaml`.

    A relative path in the record is taken from the folder that holds the home."""
    named = _env("LAKEHOUSE_PROJECT", "")
    if named:
        return named, "named by LAKEHOUSE_PROJECT"
    record = Path(home or _env("LAKEHOUSE_HOME", ".lakehouse")).expanduser().resolve() / PROJECT_RECORD
    try:
        recorded = record.read_text().strip()
    except OSError:  # none (or unreadable): the default
        recorded = ""
    if recorded:
        return str(record.parent.parent / Path(recorded).expanduser()), f"recorded in {record}"
    return "lakehouse.yaml", f"the default: LAKEHOUSE_PROJECT is unset and no declaration is recorded in {record}"


def profiles_file() -> Path:
    """`LAKEHOUSE_PROFILES`, else `profiles.yaml` beside the project's declaration."""
    named = os.environ.get("LAKEHOUSE_PROFILES", "").strip()
    if named:
        return Path(named).expanduser()
    return Path(project_file()[0]).expanduser().parent / "profiles.yaml"


def load_profile(name: str, path: Path | None = None) -> dict[str, str]:
    """The settings of one deployment profile, `${VAR}` and `${VAR:-default}` taken from the environment.

    `local` is built in (every default: local Spark, SQLite catalog, local warehouse) and may be
    refined in the file; any other profile must be in it. A variable set in the environment
    wins over its profile's value.
    """
    import yaml

    path = path or profiles_file()
    profiles: dict = {}
    if path.is_file():
        try:
            profiles = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(profiles, dict) or not isinstance(profiles.get("profiles", {}), dict):
            raise ValueError(f"{path}: expected a mapping `profiles: {{name: {{LAKEHOUSE_...: value}}}}`")
        profiles = profiles.get("profiles") or {}
    if name not in profiles:
        if name == "local":
            return {}
        known = ", ".join(sorted({"local", *profiles})) or "local"
        where = path if path.is_file() else f"{path} (no such file; LAKEHOUSE_PROFILES names another)"
        raise ValueError(f"LAKEHOUSE_PROFILE={name!r} is not a profile of {where}; known: {known}")
    values = profiles[name] or {}
    if not isinstance(values, dict):
        raise ValueError(f"{path}: profile {name!r} must map LAKEHOUSE_* settings to values")
    resolved = {}
    for key, value in values.items():
        if key not in PROFILE_KEYS:
            raise ValueError(f"{path}: profile {name!r} sets unknown setting {key!r}; "
                             f"known: {', '.join(sorted(PROFILE_KEYS))}")
        if isinstance(value, (dict, list)) or value is None:
            raise ValueError(f"{path}: profile {name!r}: {key} must be a single value")

        def substitute(match: re.Match, key=key) -> str:
            variable, default = match.group(1), match.group(2)
            found = os.environ.get(variable)
            if found is None and default is None:
                raise ValueError(f"{path}: profile {name!r}: {key} refers to ${{{variable}}}, "
                                 "which is not set in the environment")
            return found if found is not None else default

        resolved[key] = _REFERENCE.sub(substitute, str(value)).strip()
    return resolved


JIT_MODES = ("auto", "quick", "full")


def _choice(variable: str, text: str, choices: tuple[str, ...]) -> str:
    value = text.strip().lower()
    if value not in choices:
        raise ValueError(f"{variable}={text!r}: expected one of {', '.join(choices)}")
    return value


def parse_flag(variable: str, text: str) -> bool:
    """A yes/no setting: 1/true/yes or 0/false/no (any case); anything else is an error, not a guess."""
    value = text.strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no", ""):
        return False
    raise ValueError(f"{variable}={text!r}: expected 1 or 0 (true/false, yes/no)")


def parse_spark_conf(text: str) -> tuple[tuple[str, str], ...]:
    """`spark.a=1,spark.b=x` as pairs; anything that is not a `spark.` key with a value is an error."""
    pairs = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip().startswith("spark.") or not value.strip():
            raise ValueError(f"LAKEHOUSE_SPARK_CONF: {item!r} is not spark.<key>=<value>")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def _is_web_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced [ in the host
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not any(c.isspace() for c in url)


def _as_uri(location: str) -> str:
    """Turn a bare local path into a file:// URI; leave s3://, file:// etc. alone."""
    if "://" in location:
        return location
    return Path(location).expanduser().resolve().as_uri()


@dataclass(frozen=True)
class Settings:
    home: Path
    spark_master: str = "local[*]"
    driver_memory: str = "4g"
    shuffle_partitions: int = 4
    catalog_name: str = "lakehouse"
    catalog_uri: str = field(default="", repr=False)  # may hold a password
    warehouse: str = ""
    landing: str = ""
    namespace: str = "lake"
    # Further jars for Spark (comma-separated paths), beside those of runtime/jars.tsv.
    extra_jars: tuple[str, ...] = ()
    # Further Spark settings (`key=value`, comma-separated): executor memory on a cluster, event logs...
    spark_conf: tuple[tuple[str, str], ...] = ()
    # First daily partition; empty means the declaration's `start_date`.
    start_date: str = ""
    # The project's declaration (lakehouse.yaml): its sources and tables; and where its path came from.
    project: str = "lakehouse.yaml"
    project_origin: str = ""
    # An S3-compatible endpoint (e.g. SeaweedFS or MinIO); empty means AWS's own.
    s3_endpoint: str = ""
    s3_access_key: str = ""
    s3_secret_key: str = field(default="", repr=False)
    s3_region: str = "us-east-1"
    # The S3 credential `lakehouse sql` reads the lake with, instead of the platform's: one that can only read.
    sql_s3_access_key: str = ""
    sql_s3_secret_key: str = field(default="", repr=False)
    # `lakehouse sql` also exposes raw data (bronze, quarantine, the ingest log): engineers only.
    sql_raw: bool = False
    # Key of the keyed hash that pseudonymises personal data (see runtime/pii.py).
    pii_key: str = field(default="", repr=False)
    # Where failed runs and asset checks are posted (Slack-compatible webhook; see operations/alerts.py).
    # Empty: no alerts. The URL holds the webhook's token.
    alert_webhook: str = field(default="", repr=False)
    # The driver's JVM maps the installation's class-data archive, if built (see runtime/jvm_archive.py).
    jvm_archive: bool = True
    # The driver JVM's garbage collector: `parallel` (a run's, a stream's: no collector's work beside the program's
    # on the same cores; a fresh process has its Spark session about a tenth sooner than with the JVM's G1) or `g1`
    # (the SQL endpoint's: short pauses while clients wait). A collector named in JDK_JAVA_OPTIONS is taken instead.
    jvm_gc: str = "parallel"
    # How the driver's and executors' JIT compiles: `full` (the JVM's tiered compilation, C1 then C2: the fastest
    # code once warm), `quick` (C1 only: no profiling and no C2 compiles competing with the work for the cores; a
    # short run ends sooner, a long one runs slower) or `auto` (quick for a run the landing sensor requested for
    # new files of at most QUICK_JIT_MAX_BYTES in all, full otherwise; see runtime/resource.py).
    jvm_jit: str = "auto"
    # Where `lakehouse serve` (the SQL endpoint for BI tools) listens: this machine only unless set.
    serve_host: str = "127.0.0.1"
    serve_port: int = 10000
    # The catalog database as the endpoint reads it: a role that may only read (PostgreSQL). Empty: the catalog's.
    serve_catalog_uri: str = field(default="", repr=False)  # may hold a password
    # The endpoint's limit on a query's time, from its first Spark job until its last row is fetched (s; 0: none).
    serve_query_timeout: int = 600
    # The most rows of a query result the endpoint keeps for the same query on the same snapshots (0: none kept).
    serve_result_cache_rows: int = 10000
    # The most memory the endpoint's kept results take in all (MiB; a result over an eighth of it is not kept).
    serve_result_cache_mb: int = 256
    # How often the endpoint looks up the tables of the queries clients ask again, to compute a query's new answer
    # as soon as a table it reads takes a commit (s; 0: never, the next client to ask computes it).
    serve_refresh_every: int = 1
    # How long a query nobody asks is still computed again at each commit (s).
    serve_refresh_idle: int = 900
    # The most rows the endpoint holds in memory of the small tables those queries read, in all (0: none held).
    serve_hold_rows: int = 2_000_000
    # The memory of the endpoint's own executor in local mode (its queries' tasks run there, not in its JVM).
    serve_executor_memory: str = "2g"
    # The operating-system user the endpoint runs as, when started by root (empty: the one that starts it).
    serve_os_user: str = ""
    # The most rows a client may fetch of one result from the endpoint; past them, an error (0: no limit).
    serve_max_rows: int = 1_000_000
    # A Kafka cluster, as its clients' bootstrap servers (`host:port`, comma-separated): the local broker's
    # (`lakehouse kafka start` prints it) or a team's own. Empty: none.
    kafka_bootstrap_servers: str = ""
    # How its clients connect: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (a user signs in, over TLS for the
    # latter); the SASL mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; PLAIN unless set), the user and its
    # password; the PEM file of the certificate authority the brokers' certificates are checked against (empty:
    # the system's). One place turns them into each client's properties: landing/kafka.py.
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str = ""
    kafka_sasl_username: str = ""
    kafka_sasl_password: str = field(default="", repr=False)
    kafka_ssl_ca_file: str = ""
    # The deployment profile these settings came from (`LAKEHOUSE_PROFILE`).
    profile: str = "local"

    def __post_init__(self) -> None:
        home = Path(self.home).expanduser().resolve()
        object.__setattr__(self, "home", home)
        if not self.catalog_uri:
            object.__setattr__(self, "catalog_uri", f"sqlite:///{home / 'catalog.db'}")
        object.__setattr__(self, "warehouse", _as_uri(self.warehouse or str(home / "warehouse")))
        object.__setattr__(self, "landing", _as_uri(self.landing or str(home / "landing")))
        validate_identifier(self.catalog_name, "catalog name")
        validate_identifier(self.namespace, "namespace")
        CatalogUri.parse(self.catalog_uri)  # fail early on a malformed URI
        if self.serve_catalog_uri:
            reader = CatalogUri.parse(self.serve_catalog_uri)
            if reader.kind != self.catalog.kind:
                raise ValueError(f"LAKEHOUSE_SERVE_CATALOG_URI is a {self.catalog.kind} URI like the catalog's: "
                                 "the same catalog database, as a role that may only read it")
        if bool(self.sql_s3_access_key) != bool(self.sql_s3_secret_key):
            raise ValueError("LAKEHOUSE_SQL_S3_ACCESS_KEY and LAKEHOUSE_SQL_S3_SECRET_KEY go together: "
                             "set both (a read-only S3 credential for `lakehouse sql`) or neither")
        if self.alert_webhook and not _is_web_url(self.alert_webhook):
            # Not the value itself: a webhook URL holds its token.
            raise ValueError("LAKEHOUSE_ALERT_WEBHOOK must be an http:// or https:// URL "
                             "(e.g. https://hooks.slack.com/services/...), or empty for no alerts")
        _kafka_security(self)

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        """The environment's settings over the chosen profile's (`LAKEHOUSE_PROFILE`, default `local`)."""
        profile_name = _env("LAKEHOUSE_PROFILE", "local")
        profile = load_profile(profile_name)

        raw = {field: _env(variable, "") or profile.get(variable) or default
               for field, (variable, default) in ENV_SETTINGS.items()}
        values: dict[str, Any] = {
            **raw,
            "home": Path(raw["home"]),
            "shuffle_partitions": int(raw["shuffle_partitions"]),
            "extra_jars": tuple(j for j in raw["extra_jars"].split(",") if j.strip()),
            "spark_conf": parse_spark_conf(raw["spark_conf"]),
            "s3_access_key": raw["s3_access_key"] or os.environ.get("AWS_ACCESS_KEY_ID", ""),
            "s3_secret_key": raw["s3_secret_key"] or os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
            "sql_raw": parse_flag("LAKEHOUSE_SQL_RAW", raw["sql_raw"]),
            "jvm_archive": parse_flag("LAKEHOUSE_JVM_ARCHIVE", raw["jvm_archive"]),
            "jvm_jit": _choice("LAKEHOUSE_JVM_JIT", raw["jvm_jit"], JIT_MODES),
            "serve_port": _port("LAKEHOUSE_SERVE_PORT", raw["serve_port"]),
            "serve_query_timeout": _seconds("LAKEHOUSE_SERVE_QUERY_TIMEOUT", raw["serve_query_timeout"]),
            "serve_result_cache_rows": _count("LAKEHOUSE_SERVE_RESULT_CACHE_ROWS", raw["serve_result_cache_rows"]),
            "serve_result_cache_mb": _count("LAKEHOUSE_SERVE_RESULT_CACHE_MB", raw["serve_result_cache_mb"]),
            "serve_refresh_every": _seconds("LAKEHOUSE_SERVE_REFRESH_EVERY", raw["serve_refresh_every"]),
            "serve_refresh_idle": _seconds("LAKEHOUSE_SERVE_REFRESH_IDLE", raw["serve_refresh_idle"]),
            "serve_hold_rows": _count("LAKEHOUSE_SERVE_HOLD_ROWS", raw["serve_hold_rows"]),
            "serve_max_rows": _count("LAKEHOUSE_SERVE_MAX_ROWS", raw["serve_max_rows"]),
            "kafka_bootstrap_servers": _bootstrap_servers("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS",
                                                          raw["kafka_bootstrap_servers"]),
            # A password is taken as it is: spaces at its ends are part of it.
            "kafka_sasl_password": os.environ.get("LAKEHOUSE_KAFKA_SASL_PASSWORD", "")
            or profile.get("LAKEHOUSE_KAFKA_SASL_PASSWORD", ""),
        }
        values["project"], values["project_origin"] = project_file(overrides.get("home") or values["home"])
        if "project" in overrides:
            values["project_origin"] = ""
        values.update(overrides)
        return cls(profile=profile_name, **values)

    def with_(self, **changes) -> Settings:
        return replace(self, **changes)

    def describe(self) -> dict[str, str]:
        """The settings in force, for people: passwords and keys shown only as set or not."""
        hidden = "(set)"
        return {
            "profile": self.profile, "home": str(self.home), "spark_master": self.spark_master,
            "driver_memory": self.driver_memory, "spark_conf": ",".join(f"{k}={v}" for k, v in self.spark_conf),
            "catalog": self.catalog.display + (f" (password {hidden})" if self.catalog.password else ""),
            "catalog_name": self.catalog_name, "namespace": self.namespace,
            "warehouse": self.warehouse, "landing": self.landing, "project": self.project,
            "project_origin": self.project_origin,
            "s3_endpoint": self.s3_endpoint or ("(AWS)" if self.uses_s3 else ""),
            "s3_access_key": self.s3_access_key,
            "s3_secret_key": hidden if self.s3_secret_key else "",
            "sql_s3_access_key": self.sql_s3_access_key,
            "sql_s3_secret_key": hidden if self.sql_s3_secret_key else "",
            "sql_raw": "yes" if self.sql_raw else "no",
            "pii_key": hidden if self.pii_key else "(the key file under the home)",
            "alert_webhook": hidden if self.alert_webhook else "",
            "jvm_archive": "yes" if self.jvm_archive else "no",
            "jvm_jit": self.jvm_jit,
            **self._describe_serve(),
            "kafka_bootstrap_servers": self.kafka_bootstrap_servers,
            "kafka_security_protocol": self.kafka_security_protocol,
            "kafka_sasl": (f"{self.kafka_sasl_mechanism}, user {self.kafka_sasl_username}, password {hidden}"
                           if self.kafka_sasl_mechanism else ""),
            "kafka_ssl_ca_file": self.kafka_ssl_ca_file or ("(the system's)" if "SSL" in self.kafka_security_protocol
                                                             else ""),
        }

    def _describe_serve(self) -> dict[str, str]:
        """The SQL endpoint's settings in force, for people."""
        return {
            "serve": f"{self.serve_host}:{self.serve_port}",
            "serve_catalog": CatalogUri.parse(self.serve_catalog_uri).display if self.serve_catalog_uri else "",
            "serve_query_timeout": f"{self.serve_query_timeout} s" if self.serve_query_timeout else "none",
            "serve_result_cache": (f"results of up to {self.serve_result_cache_rows:,} rows, "
                                   f"{self.serve_result_cache_mb} MiB in all"
                                   if self.serve_result_cache_rows and self.serve_result_cache_mb else "off"),
            "serve_refresh": (f"looked up every {self.serve_refresh_every} s, for queries asked again within "
                              f"{self.serve_refresh_idle} s" if self.serve_refresh_every else "off"),
            "serve_hold": (f"their tables held in memory up to {self.serve_hold_rows:,} rows in all"
                           if self.serve_refresh_every and self.serve_hold_rows else "off"),
            "serve_max_rows": f"{self.serve_max_rows:,}" if self.serve_max_rows else "no limit",
            "serve_executor_memory": self.serve_executor_memory,
            "serve_os_user": self.serve_os_user or "(the one that starts it)",
        }

    @property
    def catalog(self) -> CatalogUri:
        return CatalogUri.parse(self.catalog_uri)

    @property
    def uses_s3(self) -> bool:
        return bool(self.s3_endpoint) or any(
            loc.startswith(("s3://", "s3a://")) for loc in (self.warehouse, self.landing)
        )

    def local_path(self, uri: str) -> Path:
        """The filesystem path of a file:// location (for local-only helpers)."""
        parts = urlsplit(uri)
        if parts.scheme != "file":
            raise ValueError(f"{uri!r} is not a local file:// location")
        return Path(unquote(parts.path))
