"""The SQL endpoint's users file (serving/users.py states its format): what the Python writer writes, the Java
reader (PasswordFile.java, run as its own program) signs in with; a file written by hand in the format is read
alike by both; a malformed line is the same error, naming the line, on both sides."""

import subprocess
from pathlib import Path

import pytest

from lakehouse_assets.runtime.java_jar import build
from lakehouse_assets.serving.endpoint import Endpoint, serve
from lakehouse_assets.serving.users import FORMAT, add_user, parse_users, read_users, users_file
from lakehouse_assets.settings import Settings

from .serve_fuzz import SPARK_JARS


def _sign_in(users: Path, user: str, password: str) -> tuple[int, str]:
    """PasswordFile's answer to one sign-in with this users file: its exit code and what it said."""
    done = subprocess.run(["java", "-cp", f"{SPARK_JARS}/*:{build()}", "lakehouse.PasswordFile", str(users), user],
                          input=password + "\n", capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout.strip() + done.stderr.strip()


def test_a_file_the_python_writer_writes_is_read_by_the_java_reader(tmp_path):
    users = tmp_path / "users"
    add_user(users, "ann", "correct horse")  # the rounds `lakehouse serve --add-user` writes
    add_user(users, "cat@example.org", "battery staple", iterations=1000)
    add_user(users, "ann", "new horse!", iterations=1000)  # a password changed: the user's line replaced
    assert [line.split(":")[0] for line in users.read_text().splitlines()] == ["cat@example.org", "ann"]
    assert sorted(read_users(users)) == ["ann", "cat@example.org"]
    assert _sign_in(users, "cat@example.org", "battery staple") == (0, "accepted")
    assert _sign_in(users, "ann", "new horse!") == (0, "accepted")
    assert _sign_in(users, "ann", "correct horse") == (1, "sign-in refused for ann")
    assert _sign_in(users, "bob", "battery staple") == (1, "sign-in refused for bob")


# Written by hand from the format (hashlib.pbkdf2_hmac's output, base64), not by add_user: a blank line, Windows
# line ends, spaces and tabs around a line, few rounds, a 20-byte key.
BY_HAND = ("ann:pbkdf2_sha256$1000$aGFuZC13cml0dGVuLXNsdA==$HamOHtSBlS10pNdkXV9dvHmXsRkiwfeoYBLMraWL8fI=\r\n"
           "\r\n"
           "  \tcat:pbkdf2_sha256$2000$YW5vdGhlciBzYWx0$+a3nhEZd48/Jqlk50KI/vd2jbbo= \r\n")


def test_a_file_written_by_hand_in_the_stated_format_is_read_by_both(tmp_path):
    assert "NAME:pbkdf2_sha256$ITERATIONS$SALT$HASH" in FORMAT
    users = tmp_path / "users"
    users.write_bytes(BY_HAND.encode())
    read = parse_users(BY_HAND)
    assert sorted(read) == ["ann", "cat"] and read["cat"].iterations == 2000 and len(read["cat"].digest) == 20
    assert read["ann"].matches("correct horse") and read["cat"].matches("battery staple")
    assert not read["ann"].matches("battery staple")
    assert _sign_in(users, "ann", "correct horse") == (0, "accepted")
    assert _sign_in(users, "cat", "battery staple") == (0, "accepted")
    assert _sign_in(users, "cat", "correct horse") == (1, "sign-in refused for cat")


GOOD = "ann:pbkdf2_sha256$1000$aGFuZC13cml0dGVuLXNsdA==$HamOHtSBlS10pNdkXV9dvHmXsRkiwfeoYBLMraWL8fI="


@pytest.mark.parametrize(("line", "said"), [
    ("bob pbkdf2_sha256$1000$YQ==$YQ==", "line 3: not NAME:pbkdf2_sha256$ITERATIONS$SALT$HASH"),
    ("bob:md5$1000$YQ==$YQ==", "line 3: not NAME:pbkdf2_sha256$ITERATIONS$SALT$HASH"),
    ("bob:pbkdf2_sha256$0$YQ==$YQ==", "line 3: not NAME:pbkdf2_sha256$ITERATIONS$SALT$HASH"),
    ("bob:pbkdf2_sha256$1000$YQ$YQ==", "line 3: not NAME:pbkdf2_sha256$ITERATIONS$SALT$HASH"),  # no padding
    ("b ob:pbkdf2_sha256$1000$YQ==$YQ==", "line 3: not NAME:pbkdf2_sha256$ITERATIONS$SALT$HASH"),
    ("ann:pbkdf2_sha256$1000$YQ==$YQ==", "line 3: user ann is already on line 1"),
])
def test_a_malformed_line_is_the_same_error_on_both_sides(tmp_path, line, said):
    users = tmp_path / "users"
    users.write_text(f"{GOOD}\n\n{line}\n")
    with pytest.raises(ValueError) as python:
        read_users(users)
    assert str(python.value) == f"users file {users}: {said}"
    # The endpoint refuses every sign-in, the right password's too, with the same reason.
    assert _sign_in(users, "ann", "correct horse") == (1, f"sign-in refused: the users file is malformed: {said}")
    # And the writer leaves a malformed file as it is.
    with pytest.raises(ValueError, match="line 3"):
        add_user(users, "dan", "a long password")
    assert users.read_text() == f"{GOOD}\n\n{line}\n"


def test_the_endpoint_does_not_start_with_a_malformed_users_file(tmp_path):
    settings = Settings(home=tmp_path)
    users = users_file(settings)
    users.parent.mkdir()
    users.write_text(f"{GOOD}\nann\n")
    with pytest.raises(ValueError, match=r"sql-endpoint-users: line 2: not NAME:pbkdf2_sha256\$"):
        serve(settings, Endpoint("127.0.0.1", 1, "lake"), started=lambda e: pytest.fail("started"))
