"""The SQL endpoint's users file: who may sign in to `lakehouse serve`. `lakehouse serve --add-user` writes it
(add_user); the endpoint reads it at each sign-in (java/src/main/java/lakehouse/PasswordFile.java, which follows FORMAT
below). A test reads a file written here and one written by hand with both readers.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from ..settings import Settings

FORMAT = """\
One user a line: NAME:pbkdf2_sha256$ITERATIONS$SALT$HASH
  NAME        letters, digits and _.@- ; each name on one line only
  ITERATIONS  the rounds of PBKDF2 with HMAC-SHA256, 1 to 999999999 (600000 as add_user writes it)
  SALT, HASH  standard base64 with its = padding; HASH is the derived key, as many bytes as it holds
Spaces and tabs around a line, and blank lines, are ignored. Any other line is an error that names its number."""

_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)"
# FORMAT's line as a regular expression; PasswordFile.java has the same one (LINE).
LINE = re.compile(rf"([A-Za-z0-9_.@-]+):pbkdf2_sha256\$([1-9][0-9]{{0,8}})\$({_BASE64})\$({_BASE64})")
PASSWORD_ITERATIONS = 600_000  # PBKDF2-SHA256, as current guidance asks


@dataclass(frozen=True)
class PasswordHash:
    iterations: int
    salt: bytes
    digest: bytes

    def matches(self, password: str) -> bool:
        derived = hashlib.pbkdf2_hmac("sha256", password.encode(), self.salt, self.iterations, len(self.digest))
        return hmac.compare_digest(derived, self.digest)


def users_file(settings: Settings) -> Path:
    """The endpoint's users and their password hashes; when the file exists, clients sign in."""
    return settings.home / "secrets" / "sql-endpoint-users"


def parse_users(text: str) -> dict[str, PasswordHash]:
    """The users of a users file's text (FORMAT); a ValueError naming the line for anything else."""
    users: dict[str, PasswordHash] = {}
    numbers: dict[str, int] = {}  # each user's line
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # as Java's readAllLines
    for number, line in enumerate(lines, start=1):
        line = line.strip(" \t")
        if not line:
            continue
        found = LINE.fullmatch(line)
        if found is None:
            raise ValueError(f"line {number}: not NAME:pbkdf2_sha256$ITERATIONS$SALT$HASH")
        name = found.group(1)
        if name in users:
            raise ValueError(f"line {number}: user {name} is already on line {numbers[name]}")
        users[name] = PasswordHash(int(found.group(2)), base64.b64decode(found.group(3)),
                                   base64.b64decode(found.group(4)))
        numbers[name] = number
    return users


def read_users(path: Path) -> dict[str, PasswordHash]:
    """The users in the file at `path` (none when there is no file); a ValueError naming the file and line."""
    if not path.exists():
        return {}
    try:
        return parse_users(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"users file {path}: {exc}") from None


def user_line(name: str, password: str, iterations: int = PASSWORD_ITERATIONS) -> str:
    """A user's line (FORMAT), the password kept as PBKDF2-SHA256 with a random salt."""
    if not re.fullmatch(r"[A-Za-z0-9_.@-]+", name):
        raise ValueError(f"a user name is letters, digits and _.@- only, not {name!r}")
    if len(password) < 8:
        raise ValueError("a password has at least 8 characters")
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"{name}:pbkdf2_sha256${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def add_user(path: Path, name: str, password: str, iterations: int = PASSWORD_ITERATIONS) -> None:
    """Add a user (or change their password) in the users file. The file is written whole and renamed into place,
    readable by its owner only; a malformed file is left as it is, with a ValueError naming the line."""
    line = user_line(name, password, iterations)
    read_users(path)  # the file as it is follows FORMAT
    kept = [kept for kept in (path.read_text(encoding="utf-8").splitlines() if path.exists() else [])
            if kept.strip(" \t") and kept.strip(" \t").split(":", 1)[0] != name]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    before = path.stat() if path.exists() else None  # an endpoint of its own user reads it through its group
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("\n".join([*kept, line]) + "\n")
    if before is not None:
        os.chown(partial, before.st_uid, before.st_gid)
        partial.chmod(before.st_mode & 0o640)
    os.replace(partial, path)
