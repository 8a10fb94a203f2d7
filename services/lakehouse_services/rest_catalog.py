"""A local Iceberg REST catalog server that decides who may write: the project's own server
(`lakehouse.catalog.RestCatalogServer`, java/), the Iceberg REST protocol over the lakehouse's SQL catalog (Iceberg's
JDBC catalog on its SQLite or PostgreSQL database) with Iceberg's own request handlers, started and stopped by the
project like its Kafka broker and S3 server.

Why the project's own: every table here keeps all of Iceberg, its snapshot history, its branches (each staged write
of the pipeline is one) and its tags (ML training sets pinned by name). Apache Polaris would be the first choice, but
Maven Central serves only two of its modules (`polaris-core`, `polaris-runtime-service`), not its API, persistence
and parent modules, so no Polaris server can be assembled from the registries a build reaches. Project Nessie's
runner is served whole, but its catalog refuses every Iceberg reference but `main` ("use Nessie's branches instead")
and any snapshot removal, so the platform's write-audit-publish, its tags and `lakehouse forget` cannot run on it.

Who is who: a client sends a bearer token, a JWT signed (RS256) by a key pair of the server's own, made at the
first start under `<root>/keys/` (the private key readable by its owner only). The server checks each token's
signature, issuer and expiry against the public key alone (no identity provider to run); the token's `upn` is the
principal. The rules (`CatalogRule` per principal) decide every request: a principal that writes may do
everything; any other only reads, and may be kept to some tables (`visible`) or from some (`hidden`); a principal
not named may do nothing, and a request without a valid token gets 401. `token(principal)` mints one.

The tables stay where the SQL catalog has them (`warehouse`: a local folder or s3://); `io` gives the server's own
FileIO settings (Iceberg's S3FileIO with the store's endpoint and keys), kept in its configuration (owner only).

    <root>/config/catalog.properties       written at each start
    <root>/keys/signing.pem, signing.pub    the token key pair, kept across restarts
    <root>/logs/catalog.log                 the server's log (each start appends)
    <root>/catalog.json                     the running server's pid and address

It runs on Java 17 or later: `LAKEHOUSE_CATALOG_JAVA`, else `$JAVA_HOME`, `java` on PATH, then the JDKs under
/usr/lib/jvm.
"""

from __future__ import annotations

import atexit
import base64
import glob
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import CatalogServerError, MissingBinaryError
from .process import HOST, NotReady, StateFile, alive, free_ports, listening, spawn, stop_processes, wait_ready

JAVA_ENV = "LAKEHOUSE_CATALOG_JAVA"
MIN_JAVA = 17
ISSUER = "lakehouse-catalog"
STARTUP_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
DEFAULT_HEAP = "256m"
_PRINCIPAL = re.compile(r"[a-z][a-z0-9_-]{0,62}")


def java_binary(minimum: int = MIN_JAVA) -> Path:
    """The first Java of version `minimum` or later among $LAKEHOUSE_CATALOG_JAVA, $JAVA_HOME, `java` on PATH and
    the JDKs under /usr/lib/jvm; an error naming what was found otherwise."""
    named = os.environ.get(JAVA_ENV, "").strip()
    if named:
        candidates = [named]
    else:
        java_home = os.environ.get("JAVA_HOME", "").strip()
        candidates = [str(Path(java_home) / "bin" / "java")] if java_home else []
        candidates += [shutil.which("java") or "", *sorted(glob.glob("/usr/lib/jvm/*/bin/java"), reverse=True)]
    seen = []
    for candidate in dict.fromkeys(c for c in candidates if c):
        version = java_version(Path(candidate))
        if version is None:
            continue
        seen.append(f"{candidate} ({version})")
        if version >= minimum:
            return Path(candidate)
    raise MissingBinaryError(
        f"the REST catalog server needs Java {minimum} or later; found "
        f"{', '.join(seen) or 'none'}: install one (Debian: openjdk-{minimum}-jre-headless) and name it with "
        f"{JAVA_ENV}=/path/to/bin/java" + (f" ({JAVA_ENV} names {named})" if named else ""))


def java_version(java: Path) -> int | None:
    """The major version `java -version` reports, or None when it does not run."""
    if not os.access(java, os.X_OK):
        return None
    try:
        done = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr)
    if not found:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def classpath() -> list[str]:
    """The server's class path, as the platform builds it (lakehouse_assets/runtime/java_jar.py)."""
    try:
        from lakehouse_assets.runtime.java_jar import catalog_server_classpath
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "lakehouse_assets":
            raise
        raise MissingBinaryError("the catalog server is the platform's own Java (java/, lakehouse_assets): install it "
                                 "(make setup), or pass RestCatalogServer(classpath=[...])") from None
    return catalog_server_classpath()


@dataclass(frozen=True)
class CatalogRule:
    """What one principal may do: everything (`write`), or read only the tables whose `namespace.name` matches
    `visible` (every table when empty) and not `hidden` (Java regular expressions, searched). `vend`: the FileIO
    settings handed to it with every table it loads (e.g. read-only S3 keys), so that it holds none of its own."""

    write: bool = False
    visible: str = ""
    hidden: str = ""
    vend: Mapping[str, str] = field(default_factory=dict)


class RestCatalogServer:
    """One REST catalog server on 127.0.0.1, over the SQL catalog at `catalog_uri` (a JDBC URL), its own files
    under `root`.

        with RestCatalogServer(tmp_path, catalog_uri="jdbc:sqlite:/abs/catalog.db", warehouse="/abs/warehouse",
                               rules={"pipeline": CatalogRule(write=True), "reader": CatalogRule()}) as server:
            RestCatalog("lake", uri=server.uri, token=server.token("reader"))

    `catalog_name` is the name the SQL catalog's rows carry (the lakehouse's catalog name, so that the pipeline's
    tables are the server's).
    """

    def __init__(self, root: Path | str, *, catalog_uri: str, warehouse: str, rules: Mapping[str, CatalogRule],
                 catalog_name: str = "lakehouse", jdbc_user: str = "", jdbc_password: str = "",
                 io: Mapping[str, str] | None = None, port: int | None = None, heap: str = DEFAULT_HEAP,
                 classpath: list[str] | None = None, java: Path | None = None,
                 startup_timeout: float = STARTUP_TIMEOUT) -> None:
        bad = [name for name in rules if not _PRINCIPAL.fullmatch(name)]
        if bad:
            raise CatalogServerError(f"principal names are lower-case letters, digits, '_' and '-': {bad}")
        if not catalog_uri.startswith("jdbc:"):
            raise CatalogServerError(f"the server fronts a SQL catalog: its URI is a JDBC URL, not {catalog_uri!r}")
        self.root = Path(root).expanduser().resolve()
        self.catalog_uri = catalog_uri
        self.catalog_name = catalog_name
        self.warehouse = warehouse
        self.jdbc_user = jdbc_user
        self.jdbc_password = jdbc_password
        self.io = dict(io or {})
        self.rules = dict(rules)
        self.port = port or free_ports(1)[0]
        self.heap = heap
        self._classpath = classpath
        self._java = java
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def attach(cls, root: Path | str) -> CatalogState:
        state = catalog_status(root)
        if state is None:
            raise CatalogServerError(f"no catalog server runs under {Path(root).resolve()}: start it with "
                                     "`lakehouse catalog start`")
        return state

    @property
    def uri(self) -> str:
        """The Iceberg REST API's base, as clients are given it (`uri`)."""
        return f"http://{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.root / "logs" / "catalog.log"

    @property
    def private_key(self) -> Path:
        return key_file(self.root)

    @property
    def public_key(self) -> Path:
        return self.root / "keys" / "signing.pub"

    def properties(self) -> dict[str, str]:
        """The server's configuration: its address, token checks, the rules and the SQL catalog it fronts."""
        props = {
            "host": HOST, "port": str(self.port), "name": self.catalog_name,
            "token.public-key": str(self.public_key), "token.issuer": ISSUER,
            "catalog.uri": self.catalog_uri, "catalog.warehouse": self.warehouse,
            # The pipeline's pyiceberg writes the same tables (the V1 layout, with iceberg_type).
            "catalog.jdbc.schema-version": "V1",
            **{f"catalog.{key}": value for key, value in self.io.items()},
        }
        if self.jdbc_user:
            props["catalog.jdbc.user"] = self.jdbc_user
        if self.jdbc_password:
            props["catalog.jdbc.password"] = self.jdbc_password
        for principal, rule in self.rules.items():
            props[f"rules.{principal}.write"] = str(rule.write).lower()
            for which in ("visible", "hidden"):
                if getattr(rule, which):
                    props[f"rules.{principal}.{which}"] = getattr(rule, which)
            props.update({f"rules.{principal}.vend.{key}": value for key, value in rule.vend.items()})
        return props

    def _write_files(self) -> None:
        (self.root / "config").mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(exist_ok=True)
        if not self.private_key.is_file():
            self.private_key.parent.mkdir(mode=0o700, exist_ok=True)
            partial = self.private_key.with_suffix(".part")
            _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(partial))
            partial.chmod(0o600)
            _openssl("pkey", "-in", str(partial), "-pubout", "-out", str(self.public_key))
            partial.replace(self.private_key)
        config = self.config_file
        config.touch(mode=0o600)
        config.chmod(0o600)  # it holds the database's and the store's secrets, and the keys it hands out
        config.write_text("".join(f"{key}={_escaped(value)}\n" for key, value in self.properties().items()))

    @property
    def config_file(self) -> Path:
        return self.root / "config" / "catalog.properties"

    def token(self, principal: str, seconds: int = 24 * 3600) -> str:
        """A bearer token for `principal`, valid `seconds` from now, signed with the server's private key."""
        return mint_token(self.private_key, principal, seconds)

    def settings_uri(self, principal: str, seconds: int = 24 * 3600) -> str:
        """The lakehouse's catalog URI (LAKEHOUSE_CATALOG_URI) for an engine of `principal` through this server."""
        return f"rest+http://{principal}:{self.token(principal, seconds)}@{HOST}:{self.port}"

    def command(self) -> list[str]:
        return [str(self._java or java_binary()), "-Xms32m", f"-Xmx{self.heap}", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", f"-Dlakehouse.catalog.root={self.root}",
                # Each answer leaves at once: with Nagle's algorithm a small answer waits for the client's delayed
                # acknowledgement (some 40 ms a request, hundreds of requests a run).
                "-Dsun.net.httpserver.nodelay=true",
                "-cp", os.pathsep.join(self._classpath or classpath()),
                "lakehouse.catalog.RestCatalogServer", str(self.config_file)]

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, detach: bool = False) -> RestCatalogServer:
        """Start the server and wait until it answers an authenticated request. Without `detach` it is stopped
        when this object's context ends or the interpreter exits."""
        if self.is_running():
            return self
        running = catalog_status(self.root)
        if running is not None:
            raise CatalogServerError(f"a catalog server already runs under {self.root} (pid {running.pid}, "
                                     f"{running.uri}): stop it first with `lakehouse catalog stop`")
        if listening(self.port):
            raise CatalogServerError(f"port {self.port} on {HOST} is already in use: choose another port")
        self._write_files()
        command = self.command()
        self._proc = spawn(command, self.log_file, cwd=self.root, append=True)
        STATE.write(self.root, asdict(CatalogState(
            pid=self._proc.pid, uri=self.uri, port=self.port, warehouse=self.warehouse, root=str(self.root),
            log_file=str(self.log_file), started_at=time.time())))
        if not detach:
            atexit.register(self.stop)
        try:
            probe = self.token("lakehouse-probe", int(self.startup_timeout) + 60)  # one token for every try
            wait_ready(lambda: self._answers(probe), self.startup_timeout, what=f"the catalog server on {self.uri}",
                       logs=[self.log_file], error=CatalogServerError, interval=0.2,
                       exited=lambda: None if self._proc is None or self._proc.poll() is None else
                       f"the catalog server on {self.uri} exited with code {self._proc.returncode}")
        except BaseException:
            self.stop()
            raise
        return self

    def _answers(self, token: str) -> None:
        request = urllib.request.Request(f"{self.uri}/v1/config", headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=5):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):  # it checked the token: it serves (the probe's principal may do nothing)
                return
            raise NotReady(f"HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise NotReady(str(exc)) from exc

    def stop(self, timeout: float = STOP_TIMEOUT) -> bool:
        """SIGTERM, then SIGKILL after `timeout` seconds. True if it was running. Its files stay under `root`."""
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is None:
            return stop_catalog(self.root, timeout)
        stopped = stop_processes([proc.pid], timeout, markers=_markers(self.root), error=CatalogServerError)
        proc.wait()
        STATE.path(self.root).unlink(missing_ok=True)
        return stopped

    def __enter__(self) -> RestCatalogServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class CatalogState:
    """What `<root>/catalog.json` records about a running server."""

    pid: int
    uri: str
    port: int
    warehouse: str
    root: str
    log_file: str
    started_at: float

    @property
    def markers(self) -> tuple[str, ...]:
        return _markers(Path(self.root))


STATE = StateFile("catalog.json", lambda raw: CatalogState(**raw), CatalogServerError)


def _markers(root: Path) -> tuple[str, ...]:
    """An argument of the command line of the server serving `root`: a recycled pid is not taken for it."""
    return ("-Dlakehouse.catalog.root=" + str(root),)


def catalog_status(root: Path | str) -> CatalogState | None:
    """The server recorded under `root` if it still runs, else None."""
    return STATE.running(root, lambda state: alive(state.pid, *state.markers))


def stop_catalog(root: Path | str, timeout: float = STOP_TIMEOUT) -> bool:
    """Stop the server recorded under `root`, from any process. True if one was running; its data stays."""
    return STATE.stop(root, lambda state: stop_processes([state.pid], timeout, markers=state.markers,
                                                         error=CatalogServerError))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def key_file(root: Path | str) -> Path:
    """The server's private key under `root`, which signs its tokens."""
    return Path(root).expanduser().resolve() / "keys" / "signing.pem"


def mint_token(private_key: Path, principal: str, seconds: int) -> str:
    """A JWT (RS256) naming `principal` (`upn`, `sub`), issued now by ISSUER and valid `seconds`."""
    if not _PRINCIPAL.fullmatch(principal):
        raise CatalogServerError(f"{principal!r} is not a principal name (lower-case letters, digits, '_', '-')")
    now = int(time.time())
    header = _b64(json.dumps({"alg": "RS256", "typ": "JWT"}).encode())
    claims = _b64(json.dumps({"iss": ISSUER, "sub": principal, "upn": principal, "iat": now,
                              "exp": now + seconds}).encode())
    signed = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(private_key)],
                            input=f"{header}.{claims}".encode(), capture_output=True, timeout=60)
    if signed.returncode != 0:
        raise CatalogServerError(f"signing a token with {private_key} failed: {signed.stderr.decode()[-500:]}")
    return f"{header}.{claims}.{_b64(signed.stdout)}"


def _escaped(value: str) -> str:
    """A value as a .properties file reads it back (backslashes, and line breaks kept out)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _openssl(*args: str) -> None:
    if shutil.which("openssl") is None:
        raise MissingBinaryError("openssl is needed to make the catalog server's token key (Debian: openssl)")
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise CatalogServerError(f"openssl {args[0]} failed: {done.stderr[-1000:]}")
