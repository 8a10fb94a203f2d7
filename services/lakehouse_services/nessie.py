"""A local Iceberg REST catalog server that decides who may write: Project Nessie's server (its Quarkus runner, one
jar of Maven Central that `jars.tsv` names under the use `catalog-server`, resolved by `make setup`), started and
stopped by the project like its Kafka broker and S3 server.

Apache Polaris would be the first choice (principals, roles and grants of its own), but Maven Central serves only two
of its modules (`polaris-core`, `polaris-runtime-service`), not its API, persistence and parent modules, so no
Polaris server can be assembled from the registries a user's build reaches. Nessie's runner is served whole.

Who is who: a client sends a bearer token, a JWT signed (RS256) by a key pair of the server's own, made at the
first start under `<root>/keys/` (the private key readable by its owner only). The server checks each token's
signature, issuer and expiry against the public key alone (Quarkus OIDC with a public key: no identity provider
to run). The token's `upn` is the principal; Nessie's authorization rules (CEL expressions over the principal, the
operation and the table's name, `rules`) allow or refuse every read and commit; an operation no rule allows is
refused, and so is a request without a valid token. `token(principal)` mints one.

Its tables live on S3 (Nessie's catalog writes table metadata itself, to an object store only): `warehouse` is an
s3:// location, `s3` the store's endpoint and keys, which the server keeps in its configuration (owner only).

    <root>/config/application.properties   written at each start (Quarkus reads it from the working folder)
    <root>/keys/signing.pem, signing.pub    the token key pair, kept across restarts
    <root>/data/                            the catalog's state (RocksDB), kept across restarts
    <root>/logs/catalog.log                 the server's log (each start appends)
    <root>/catalog.json                     the running server's pid and address

It needs Java 21 or later: `LAKEHOUSE_CATALOG_JAVA`, else `$JAVA_HOME`, `java` on PATH, then the JDKs under
/usr/lib/jvm, the first of version 21 or later.
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
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import CatalogServerError, MissingBinaryError
from .process import HOST, NotReady, StateFile, alive, free_ports, listening, spawn, stop_processes, wait_ready

JAVA_ENV = "LAKEHOUSE_CATALOG_JAVA"
MIN_JAVA = 21
ISSUER = "lakehouse-catalog"
STARTUP_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
DEFAULT_HEAP = "512m"
WAREHOUSE = "lake"  # the name clients give as `warehouse`
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
        f"the REST catalog server (Nessie) needs Java {minimum} or later; found "
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


def server_jar() -> Path:
    """The runner jar of `jars.tsv`'s use `catalog-server` in the installation's local repository."""
    try:
        from lakehouse_assets.runtime.jars import CATALOG_SERVER, jars_for
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "lakehouse_assets":
            raise
        raise MissingBinaryError("the catalog server's jar is named by the platform (lakehouse_assets/runtime/"
                                 "jars.tsv): install it (make setup), or pass NessieCatalog(jar=...)") from None
    (jar,) = jars_for({CATALOG_SERVER})
    return jar


@dataclass(frozen=True)
class S3Store:
    """The object store the tables live on, as the server reaches it."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"


@dataclass(frozen=True)
class CatalogState:
    """What `<root>/catalog.json` records about a running server."""

    pid: int
    uri: str
    port: int
    management_port: int
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


def cel_string(text: str) -> str:
    """`text` as a CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class NessieCatalog:
    """One Nessie server on 127.0.0.1 with its state under `root`.

        with NessieCatalog(tmp_path, warehouse="s3://lake/rest", s3=S3Store(...),
                           rules={"pipeline": "true", "reader": "op in [...]"}) as catalog:
            RestCatalog("lake", uri=catalog.uri, token=catalog.token("reader"), warehouse=catalog.warehouse_name)

    `rules` maps each principal to a CEL condition over `op`, `path` (the table's `namespace.name`) and `ref`: what
    that principal may do. Any principal not named may do nothing.
    """

    def __init__(self, root: Path | str, *, warehouse: str, s3: S3Store, rules: Mapping[str, str],
                 port: int | None = None, heap: str = DEFAULT_HEAP, jar: Path | None = None,
                 java: Path | None = None, startup_timeout: float = STARTUP_TIMEOUT) -> None:
        if not warehouse.startswith("s3://"):
            raise CatalogServerError(f"the REST catalog keeps its tables on S3: its warehouse must be an s3:// "
                                     f"location, not {warehouse!r}")
        bad = [name for name in rules if not _PRINCIPAL.fullmatch(name)]
        if bad:
            raise CatalogServerError(f"principal names are lower-case letters, digits, '_' and '-': {bad}")
        self.root = Path(root).expanduser().resolve()
        self.warehouse = warehouse
        self.s3 = s3
        self.rules = dict(rules)
        ports = free_ports(2)
        self.port = port or ports[0]
        self.management_port = next(p for p in ports if p != self.port)
        self.heap = heap
        self._jar = jar
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
        return f"http://{HOST}:{self.port}/iceberg"

    @property
    def warehouse_name(self) -> str:
        return WAREHOUSE

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
        """The server's configuration: its ports, its store, token checks, the rules and the warehouse."""
        public = "".join(line for line in self.public_key.read_text().splitlines() if not line.startswith("-----"))
        props = {
            "quarkus.http.host": HOST, "quarkus.http.port": str(self.port),
            "quarkus.management.host": HOST, "quarkus.management.port": str(self.management_port),
            "quarkus.log.console.format": "%d{HH:mm:ss} %-5p [%c{2.}] %s%e%n",
            "nessie.version.store.type": "ROCKSDB",
            "nessie.version.store.persist.rocks.database-path": str(self.root / "data"),
            # Every request but the server's own health needs a valid token.
            "nessie.server.authentication.enabled": "true",
            "nessie.server.authentication.anonymous-paths": "",
            "nessie.server.authentication.anonymous-path-prefixes": "",
            "quarkus.oidc.tenant-enabled": "true",
            "quarkus.oidc.public-key": public,
            "quarkus.oidc.token.issuer": ISSUER,
            "quarkus.oidc.token.principal-claim": "upn",
            "nessie.server.authorization.enabled": "true",
            "nessie.catalog.default-warehouse": WAREHOUSE,
            f"nessie.catalog.warehouses.{WAREHOUSE}.location": self.warehouse,
            "nessie.catalog.service.s3.default-options.endpoint": self.s3.endpoint,
            "nessie.catalog.service.s3.default-options.path-style-access": "true",
            "nessie.catalog.service.s3.default-options.region": self.s3.region,
            # Clients sign their S3 requests with their own keys: Iceberg 1.12's S3FileIO asks for remote signing
            # at a path Nessie 0.99 does not serve (404).
            "nessie.catalog.service.s3.default-options.request-signing-enabled": "false",
            "nessie.catalog.service.s3.default-options.access-key": "urn:nessie-secret:quarkus:lakehouse.s3",
            "lakehouse.s3.name": self.s3.access_key,
            "lakehouse.s3.secret": self.s3.secret_key,
        }
        for principal, condition in self.rules.items():
            props[f"nessie.server.authorization.rules.{principal.replace('-', '_')}"] = \
                f"role == {cel_string(principal)} && ({condition})"
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
        config = self.root / "config" / "application.properties"
        config.touch(mode=0o600)
        config.chmod(0o600)  # it holds the store's secret key
        config.write_text("".join(f"{key}={_escaped(value)}\n" for key, value in self.properties().items()))

    def token(self, principal: str, seconds: int = 24 * 3600) -> str:
        """A bearer token for `principal`, valid `seconds` from now, signed with the server's private key."""
        return mint_token(self.private_key, principal, seconds)

    def command(self) -> list[str]:
        return [str(self._java or java_binary()), "-Xms64m", f"-Xmx{self.heap}", "-XX:+UseSerialGC",
                f"-Dlakehouse.catalog.root={self.root}", "--enable-native-access=ALL-UNNAMED",
                "-jar", str(self._jar or server_jar())]

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, detach: bool = False) -> NessieCatalog:
        """Start the server and wait until it answers an authenticated request. Without `detach` it is stopped
        when this object's context ends or the interpreter exits."""
        if self.is_running():
            return self
        running = catalog_status(self.root)
        if running is not None:
            raise CatalogServerError(f"a catalog server already runs under {self.root} (pid {running.pid}, "
                                     f"{running.uri}): stop it first with `lakehouse catalog stop`")
        busy = [port for port in (self.port, self.management_port) if listening(port)]
        if busy:
            raise CatalogServerError(f"ports {busy} on {HOST} are already in use: choose another port")
        self._write_files()
        self._proc = spawn(self.command(), self.log_file, cwd=self.root, append=True)
        STATE.write(self.root, asdict(CatalogState(
            pid=self._proc.pid, uri=self.uri, port=self.port, management_port=self.management_port,
            warehouse=self.warehouse, root=str(self.root), log_file=str(self.log_file), started_at=time.time())))
        if not detach:
            atexit.register(self.stop)
        try:
            probe = self.token("lakehouse-probe", int(self.startup_timeout) + 60)  # one token for every try
            wait_ready(lambda: self._answers(probe), self.startup_timeout, what=f"the catalog server on {self.uri}",
                       logs=[self.log_file], error=CatalogServerError, interval=0.5,
                       exited=lambda: None if self._proc is None or self._proc.poll() is None else
                       f"the catalog server on {self.uri} exited with code {self._proc.returncode}")
        except BaseException:
            self.stop()
            raise
        return self

    def _answers(self, token: str) -> None:
        request = urllib.request.Request(f"http://{HOST}:{self.port}/api/v2/config",
                                         headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=5):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):  # it checked the token: it serves (the probe may do nothing)
                return
            raise NotReady(f"HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise NotReady(str(exc)) from exc

    def stop(self, timeout: float = STOP_TIMEOUT) -> bool:
        """SIGTERM, then SIGKILL after `timeout` seconds. True if it was running. Its data stays under `root`."""
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is None:
            return stop_catalog(self.root, timeout)
        stopped = stop_processes([proc.pid], timeout, markers=_markers(self.root), error=CatalogServerError)
        proc.wait()
        STATE.path(self.root).unlink(missing_ok=True)
        return stopped

    def __enter__(self) -> NessieCatalog:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
