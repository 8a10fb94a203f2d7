"""The PII key: long enough, created once and whole however many processes start together, and never in a plan."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse_assets.errors import ConfigurationError
from lakehouse_assets.runtime.pii import MIN_KEY_BYTES, _pads, key_file, keyed_hash_of, pii_key
from lakehouse_assets.settings import Settings
from lakehouse_assets.silver.events import silver_spec, split

from ..shop import SHOP


def test_a_short_or_empty_key_is_refused_with_how_to_make_one(tmp_path):
    with pytest.raises(ConfigurationError, match=r"LAKEHOUSE_PII_KEY is 5 bytes; at least 32 .*token_hex\(32\)"):
        pii_key(Settings(home=tmp_path, pii_key="short"))
    path = key_file(Settings(home=tmp_path))
    path.parent.mkdir(parents=True)
    path.write_text("")  # left by a crash between creating the file and writing it
    with pytest.raises(ConfigurationError, match="is 0 bytes"):
        pii_key(Settings(home=tmp_path))
    assert len(pii_key(Settings(home=tmp_path, pii_key="k" * MIN_KEY_BYTES))) == MIN_KEY_BYTES


def test_processes_starting_together_on_a_fresh_home_all_get_the_one_key(tmp_path):
    code = ("import sys; from lakehouse_assets.settings import Settings; from lakehouse_assets.runtime.pii import pii_key;"
            "print(pii_key(Settings(home=sys.argv[1])).decode())")
    starters = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
                for _ in range(8)]
    keys = {p.communicate(timeout=120)[0].strip() for p in starters}
    assert all(p.returncode == 0 for p in starters)
    path = key_file(Settings(home=tmp_path))
    assert keys == {path.read_text()} and len(path.read_text()) == 64
    assert sorted(p.name for p in path.parent.iterdir()) == ["pii.key"]  # no draft left behind
    assert path.stat().st_mode & 0o777 == 0o600


def test_silvers_plan_holds_no_byte_of_the_key_and_the_hash_is_the_hmac(lakehouse):
    source = SHOP.events["events"]
    hashes = source.pseudonyms
    fields = [T.StructField(hashes.get(f.name, f.name), T.StringType() if f.name in hashes else f.dataType)
              for f in silver_spec(source).schema.fields]
    schema = T.StructType([*fields, T.StructField("rule", T.StringType())])
    row = {f.name: None for f in schema.fields} | {"email": "ana@example.com", "ip": "10.1.2.3"}
    judged = lakehouse.spark.createDataFrame([tuple(row[f.name] for f in schema.fields)], schema)
    clean, _ = split(lakehouse, source, judged)

    key = pii_key(lakehouse.settings)
    ipad, opad = _pads(key)
    secrets = [key.decode(), key.hex(), ipad.hex(), opad.hex(), base64.b64encode(ipad).decode(),
               base64.b64encode(opad).decode(), key[:16].hex()]
    got = clean.select("email_hash", "ip_hash").first()
    assert (got.email_hash, got.ip_hash) == (keyed_hash_of("ana@example.com", key), keyed_hash_of("10.1.2.3", key))
    # What `explain(True)`, the SQL UI and the event log show: every plan, the final adaptive one too.
    utils = lakehouse.spark._jvm.PythonSQLUtils
    plans = "".join(utils.explainString(clean._jdf.queryExecution(), mode) for mode in ("extended", "formatted"))
    assert "sha2" in plans.lower()  # the hash is in the plan, computed by Spark
    leaked = [s for s in secrets if s.lower() in plans.lower()]
    assert not leaked, leaked
    assert clean.where(F.col("email_hash").isNull()).count() == 0


def test_the_spark_ui_listens_on_loopback_only(spark):
    port = int(spark.sparkContext.uiWebUrl.rsplit(":", 1)[1])
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                listening.append(address)
    loopback = ("0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F")  # IPv4, IPv6, v4 in v6
    assert listening and all(a in loopback for a in listening), listening
