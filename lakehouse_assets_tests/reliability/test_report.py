"""The reliability report says what each case did: a skipped case did not run, so it is not reported as passed."""

from .report import main, outcomes

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="4">
<testcase classname="lakehouse_assets_tests.reliability.test_a" name="test_ran" time="1.0"/>
<testcase classname="lakehouse_assets_tests.reliability.test_a" name="test_not_run[postgresql]" time="0.0">
<skipped type="pytest.skip" message="no PostgreSQL server on this machine">reason</skipped></testcase>
<testcase classname="lakehouse_assets_tests.reliability.test_b" name="test_broken" time="2.0">
<failure message="AssertionError: a pinned read changed&#10;assert False">trace</failure></testcase>
<testcase classname="lakehouse_assets_tests.reliability.test_b" name="test_setup" time="0.1">
<error message="failed on setup with &quot;OSError&quot;">trace</error></testcase>
</testsuite></testsuites>
"""


def test_a_skipped_case_is_reported_as_skipped_not_passed(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    assert outcomes(junit) == [
        ("test_a::test_ran", "passed"),
        ("test_a::test_not_run[postgresql]", "skipped: no PostgreSQL server on this machine"),
        ("test_b::test_broken", "FAILED: AssertionError: a pinned read changed"),
        ("test_b::test_setup", 'FAILED: failed on setup with "OSError"'),
    ]


def test_the_headline_does_not_claim_every_test_passed_when_one_was_skipped(tmp_path):
    # pytest exits 0 when cases are skipped, so `make soak` passes "every test passed": the tally corrects it.
    junit, out = tmp_path / "junit.xml", tmp_path / "RELIABILITY.md"
    junit.write_text(JUNIT.replace("<failure", "<skipped").replace("</failure>", "</skipped>")
                     .replace("<error", "<skipped").replace("</error>", "</skipped>"))
    main([str(tmp_path / "none.jsonl"), "--junit", str(junit), "--out", str(out), "--outcome", "every test passed"])
    text = out.read_text()
    assert "every test passed" not in text
    assert "1 passed, 3 skipped of 4 cases" in text
    assert "| `test_a::test_not_run[postgresql]` | skipped: no PostgreSQL server on this machine |" in text
    assert "| `test_a::test_ran` | passed |" in text

    junit.write_text(JUNIT.split('<testcase classname="lakehouse_assets_tests.reliability.test_a" name="test_not')[0]
                     + "</testsuite></testsuites>")
    main([str(tmp_path / "none.jsonl"), "--junit", str(junit), "--out", str(out), "--outcome", "every test passed"])
    assert "UTC): every test passed. " in out.read_text()
