"""Parquet parts plus a SQLite run catalog (see docs/store.md for the layout)."""

from mismatchctl.store.opening import open_store
from mismatchctl.store.store import RunInfo, Store, check_run_name

__all__ = ["RunInfo", "Store", "check_run_name", "open_store"]
