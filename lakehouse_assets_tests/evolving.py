"""What the declaration-change acceptance tests (the shop's, the second domain's) check the same way."""

from __future__ import annotations

import subprocess


def edited(declaration: str, changes: list[tuple[str, str]]) -> str:
    """The declaration with each text replaced, each found exactly once."""
    for old, new in changes:
        assert declaration.count(old) == 1, old
        declaration = declaration.replace(old, new)
    return declaration


def apply_refused_then_in_place(command: str, env: dict, catalog, namespace: str, before: dict, dropped: str):
    """`lakehouse apply` without --allow-drop refuses (the dropped column held) and changes nothing; with it, every
    table keeps its snapshot and its data files: metadata only."""
    refused = subprocess.run([command, "apply"], env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1 and f"held (needs --allow-drop): {dropped}" in refused.stdout, refused.stdout
    assert {n: catalog.load_table((namespace, n)).metadata for n in before} == \
        {n: t.metadata for n, t in before.items()}
    applied = subprocess.run([command, "apply", "--allow-drop"], env=env, capture_output=True, text=True,
                             timeout=300)
    assert applied.returncode == 0, (applied.stdout, applied.stderr)
    for n, was in before.items():
        after = catalog.load_table((namespace, n))
        assert after.metadata.current_snapshot_id == was.metadata.current_snapshot_id, n
        if was.current_snapshot() is not None:
            assert {t.file.file_path for t in after.scan().plan_files()} == \
                {t.file.file_path for t in was.scan().plan_files()}, n
