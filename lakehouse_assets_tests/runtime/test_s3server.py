"""The local S3 server checks signatures, keeps objects and stops cleanly. No Spark here: these run in seconds."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import asdict, replace

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

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
