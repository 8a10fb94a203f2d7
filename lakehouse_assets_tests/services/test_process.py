"""The local services' process helper on plain Python processes: started with a log, waited for, found running
from its state file, and stopped by SIGTERM, by SIGKILL when SIGTERM is ignored, with what it started too."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from lakehouse_services import process
from lakehouse_services.errors import ServiceError
from lakehouse_services.process import NotReady

# Prints its pid, then its child's when asked, then waits to be stopped.
WAITER = """
import os, signal, subprocess, sys, time
if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("pid", os.getpid(), flush=True)
if "--child" in sys.argv:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print("child", child.pid, flush=True)
time.sleep(60)
"""


def _start(tmp_path: Path, *flags: str):
    log = tmp_path / "logs" / "waiter.log"
    proc = process.spawn([sys.executable, "-c", WAITER, *flags], log)
    lines = process.wait_ready(lambda: _printed(log, 2 if "--child" in flags else 1), 20, what="the waiter",
                               logs=[log])
    return proc, log, {line.split()[0]: int(line.split()[1]) for line in lines}


def _printed(log: Path, n: int) -> list[str]:
    lines = log.read_text().splitlines()
    if len(lines) < n:
        raise NotReady(f"{len(lines)} of {n} lines")
    return lines


def test_free_ports_are_distinct_and_unused():
    ports = process.free_ports(5)
    assert len(set(ports)) == 5
    assert not any(process.listening(port) for port in ports)


def test_free_ports_are_never_a_port_a_service_starts_on_by_default(monkeypatch):
    from lakehouse_services.s3server import S3Ports

    master_grpc = S3Ports().master_grpc  # `lakehouse s3 start` listens there, started by another test meanwhile
    monkeypatch.setattr(process, "_below_ephemeral", lambda: range(master_grpc - 2, master_grpc + 3))
    drawn = {port for _ in range(40) for port in process.free_ports(2)}
    assert master_grpc not in drawn and drawn <= set(range(master_grpc - 2, master_grpc + 3))


def test_a_process_is_started_recorded_found_and_stopped(tmp_path):
    proc, log, printed = _start(tmp_path)
    assert printed["pid"] == proc.pid and log.parent.is_dir()
    process.write_state(tmp_path / "waiter.json", {"pid": proc.pid})
    state = process.read_state(tmp_path / "waiter.json", lambda raw: raw["pid"])
    assert state == proc.pid and process.alive(proc.pid)
    assert process.alive(proc.pid, "-c") and not process.alive(proc.pid, "--not-an-argument")
    assert process.stop_processes([proc.pid], 10) is True
    proc.wait(5)
    assert not process.alive(proc.pid)
    assert process.stop_processes([proc.pid], 10) is False  # a second stop is harmless
    assert process.read_state(tmp_path / "absent.json", dict) is None


def test_sigterm_ignored_means_sigkill_after_the_grace_period(tmp_path):
    proc, _, _ = _start(tmp_path, "--ignore-term")
    started = time.monotonic()
    assert process.stop_processes([proc.pid], 0.5) is True
    assert proc.wait(5) == -signal.SIGKILL
    assert time.monotonic() - started < 5


def test_a_process_group_is_stopped_with_what_it_started(tmp_path):
    proc, _, printed = _start(tmp_path, "--child")
    assert process.alive(printed["child"])
    assert process.stop_processes([proc.pid], 10, group=True) is True
    proc.wait(5)
    assert process.wait_gone([printed["child"]], 5)


def test_waiting_reports_an_exit_or_a_timeout_with_the_log(tmp_path):
    log = tmp_path / "failing.log"
    proc = process.spawn([sys.executable, "-c", "print('no config here'); raise SystemExit(3)"], log)
    with pytest.raises(ServiceError, match=r"(?s)failing exited with code 3 while starting.*no config here"):
        process.wait_ready(lambda: _printed(log, 5), 20, what="failing", logs=[log],
                           exited=lambda: None if proc.poll() is None else f"failing exited with code {proc.returncode}")
    with pytest.raises(ServiceError, match=r"(?s)never: not ready within 0 s \(1 of 5 lines\).*no config here"):
        process.wait_ready(lambda: _printed(log, 5), 0.3, what="never", logs=[log])


def test_an_unreadable_state_file_says_what_to_do(tmp_path):
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(ServiceError, match="state.json is unreadable .*delete it if the service is not running"):
        process.read_state(tmp_path / "state.json", dict)
