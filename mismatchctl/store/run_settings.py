"""Per-run settings kept in the catalog (``run_settings``): what a command remembers about a run
for the next one, such as the tokenizer its token ids are decoded with.

The table is created by the first write of a setting (``CREATE TABLE IF NOT EXISTS``, in the
write's transaction); a catalog without it has no settings. A setting is removed with its run
(``ON DELETE CASCADE``).
"""

from __future__ import annotations

import sqlite3

from mismatchctl.store.catalog import connect
from mismatchctl.store.lock import write_lock
from mismatchctl.store.store import Store
from mismatchctl.store.writable import StoreWrites

TOKENIZER = "tokenizer"

_DDL = """
CREATE TABLE IF NOT EXISTS run_settings (
    run TEXT NOT NULL REFERENCES runs(name) ON DELETE CASCADE,
    key TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (run, key)
)
"""


def set_run_setting(store: Store, run: str, key: str, value: str) -> None:
    """Remember ``key = value`` for ``run`` (replacing an earlier value), in one transaction."""
    store.run(run)  # the run must exist: names a missing run with the runs there are
    with write_lock(store.root), StoreWrites(store.root, f"remembering the {key} of run `{run}`"):
        con = connect(store.root)
        try:
            con.execute("BEGIN IMMEDIATE")
            con.execute(_DDL)
            con.execute("INSERT OR REPLACE INTO run_settings VALUES (?, ?, ?)", (run, key, value))
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise
        finally:
            con.close()
        store.publish()


def run_setting(store: Store, run: str, key: str) -> str | None:
    """The value remembered for ``run``, or None."""
    con = connect(store.root)
    try:
        return _get(con, run, key)
    finally:
        con.close()


def _get(con: sqlite3.Connection, run: str, key: str) -> str | None:
    found = con.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'run_settings'"
    ).fetchone()
    if found is None:
        return None
    row = con.execute(
        "SELECT value FROM run_settings WHERE run = ? AND key = ?", (run, key)
    ).fetchone()
    return None if row is None else str(row[0])
