"""A forget that cannot finish: its proof and the command's output name the tables done and those not done (with
why), the subject is not purged and the command exits 1. No Spark: the proof is made here, as `Forget.run` makes
it when a table's step fails (the real one: test_capture_forget.py)."""

import json

import lakehouse_assets.operations.forget as forget_module
from lakehouse_assets.operations.forget import ForgetReport, TableProof


def _report(not_done: str | None) -> ForgetReport:
    report = ForgetReport("28", independent_scan={"files_scanned": {"warehouse": 3}})
    report.tables = [TableProof("bronze_cdc_accounts", "changes", rows_deleted=3, lines_forgotten=3),
                     TableProof("silver_accounts", "current", rows_deleted=1, not_done=not_done),
                     TableProof("silver_accounts_history", "versions", rows_deleted=2)]
    return report


def test_the_tables_not_done_are_named_with_why_and_the_command_exits_1_until_none_is_left(
        tmp_path, monkeypatch, capsys):
    from lakehouse_assets.cli import main

    (tmp_path / "lakehouse.yaml").write_text("name: t\nstart_date: 2025-01-01\n")
    monkeypatch.setenv("LAKEHOUSE_PROJECT", str(tmp_path / "lakehouse.yaml"))
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path))
    why = "MaintenanceError: forget: the expiry of silver_accounts was interrupted"
    reports = iter([_report(why), _report(why), _report(None)])
    monkeypatch.setattr(forget_module.Forget, "run", lambda self, *a, **k: next(reports))

    assert main(["forget", "--subject", "28"]) == 1
    out = capsys.readouterr().out
    assert "tables done: bronze_cdc_accounts, silver_accounts_history" in out
    assert f"table NOT done: silver_accounts: {why}" in out
    assert "run the same command again to finish" in out and "NOT purged" in out

    assert main(["forget", "--subject", "28", "--json"]) == 1
    proof = json.loads(capsys.readouterr().out)
    assert proof["tables_done"] == ["bronze_cdc_accounts", "silver_accounts_history"]
    assert proof["tables_not_done"] == {"silver_accounts": why} and not proof["purged"]

    assert main(["forget", "--subject", "28"]) == 0  # run again: every table done
    out = capsys.readouterr().out
    assert "NOT done" not in out and out.rstrip().endswith("purged: no file of the tables, the landing zone or "
                                                          "staging holds the subject")
