"""A store in a bucket (``s3://bucket/prefix``, ``gs://...``): the same layout as on disk.

The Parquet parts are objects under the URI, read in place (pyarrow opens ``s3://`` / ``gs://``
paths itself; credentials and endpoint from the environment, as for remote inputs). The SQLite
catalog cannot live in a bucket (no locks, no in-place writes), so a command works on a private
local copy of the ``catalog.sqlite`` object (the *mirror*):

- reading: the catalog object is downloaded once per command; parts are read from the bucket;
- writing (``ingest``, ``ingest-metrics``, ``runs rm``): the local transaction machinery runs
  against the mirror (staging, checks, one catalog commit), then :meth:`RemoteStore.publish`
  uploads the new part objects (invisible until a catalog names them), checks that the catalog
  object is still the one downloaded (same sha256), and uploads the new catalog in one PUT: readers see the old
  store or the new one. If another writer changed the catalog meanwhile, the uploaded parts are
  deleted and the command fails, leaving the bucket as it was. That check narrows the window
  between two writers, it does not close it (no conditional writes through pyarrow): write to a
  bucket store from one place at a time.

A writer killed after uploading parts but before the catalog leaves unreferenced objects: they are
never read (:meth:`RemoteStore.orphans` lists them) and the next write deletes those older than an
hour; so does a metrics file replaced by ``ingest-metrics``.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from mismatchctl.errors import StoreError
from mismatchctl.store import catalog
from mismatchctl.store.parts import MASKED, METRICS, ROUTING, SEQUENCES, TOKENS, part_dir
from mismatchctl.store.store import STAGING, RunInfo, Store, Transaction

SCHEMES = ("s3", "gs")
ORPHAN_AGE_S = 3600.0  # unreferenced objects older than this are deleted by the next write
HINT = (
    "check the URI and the credentials in the environment (AWS_PROFILE, AWS_ACCESS_KEY_ID, "
    "AWS_ENDPOINT_URL for an S3-compatible server; Google application-default credentials)."
)


def is_store_uri(path: object) -> bool:
    return isinstance(path, str) and path.split("://", 1)[0].lower() in SCHEMES and "://" in path


class RemoteStore(Store):
    """A store whose parts and catalog are objects under ``uri``; ``root`` is the local mirror."""

    publishes = True

    def __init__(self, uri: str) -> None:
        if "?" in uri:
            raise StoreError(
                f"store {uri}: options in the URI are not accepted (they would be shown and "
                "recorded)",
                "set them in the environment instead, e.g. AWS_ENDPOINT_URL, AWS_PROFILE.",
            )
        self.uri = uri.rstrip("/")
        try:
            self.fs, self.base = pafs.FileSystem.from_uri(self.uri)
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise StoreError(
                f"cannot open the store {self.uri}: {_first_line(exc)}", HINT
            ) from None
        mirror = Path(tempfile.mkdtemp(prefix="mismatchctl-store-"))
        atexit.register(shutil.rmtree, mirror, ignore_errors=True)
        super().__init__(mirror)
        self._seen = self._download()

    def __str__(self) -> str:
        return self.uri

    # --- reading ------------------------------------------------------------------------
    def location(self, rel: str) -> Any:  # a URI string: pyarrow opens it
        """The URI of a file of the store, given its path relative to the store."""
        return f"{self.uri}/{rel}"

    def has_file(self, rel: str) -> bool:
        return self.fs.get_file_info(f"{self.base}/{rel}").type == pafs.FileType.File

    def scan(self, run: str | None = None, kind: str = TOKENS) -> Any:
        raise StoreError(
            f"scan() reads local stores only; {self.uri} is in a bucket",
            "read its parts with DuckDB or Polars directly (docs/store.md shows the layout).",
        )

    # --- writing ------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        with super().transaction() as txn:
            yield txn
        self.publish()

    def remove(self, run: str) -> RunInfo:
        info = super().remove(run)
        self.publish()
        for kind in (TOKENS, SEQUENCES, METRICS, ROUTING, MASKED):
            self.fs.delete_dir_contents(f"{self.base}/{part_dir(kind, run)}", missing_dir_ok=True)
        return info

    def publish(self) -> None:
        """Upload the mirror's new part files, then (if nobody changed it) the catalog."""
        new = sorted(p for p in self.root.rglob("*.parquet") if STAGING not in p.parts)
        uploaded: list[str] = []
        try:
            for path in new:
                rel = path.relative_to(self.root).as_posix()
                self._upload(path, rel)
                uploaded.append(rel)
            if self._catalog_digest() != self._seen:
                raise StoreError(
                    f"another writer changed the store {self.uri} while this command ran; "
                    "nothing of this command was kept",
                    "run the command again (write to a bucket store from one place at a time).",
                )
            self._upload(self.root / catalog.CATALOG_NAME, catalog.CATALOG_NAME)
        except BaseException:
            for rel in uploaded:
                self.fs.delete_file(f"{self.base}/{rel}")
            raise
        finally:
            for path in new:
                path.unlink(missing_ok=True)
        self._seen = self._catalog_digest()
        self._sweep_orphans()

    def orphans(self, min_age_s: float = 0.0) -> list[str]:
        """Part objects no catalog row names (left by a killed writer), relative paths."""
        if not self.exists():
            return []
        known = self.known_files()
        now = time.time()
        found = []
        for kind in (TOKENS, SEQUENCES, METRICS, ROUTING, MASKED):
            selector = pafs.FileSelector(
                f"{self.base}/{kind}", recursive=True, allow_not_found=True
            )
            for info in self.fs.get_file_info(selector):
                if info.type != pafs.FileType.File or not info.path.endswith(".parquet"):
                    continue
                rel = info.path[len(self.base) + 1 :]
                old = info.mtime is None or now - info.mtime.timestamp() >= min_age_s
                if rel not in known and old:
                    found.append(rel)
        return sorted(found)

    def _sweep_orphans(self) -> None:
        for rel in self.orphans(ORPHAN_AGE_S):
            self.fs.delete_file(f"{self.base}/{rel}")

    # --- objects ------------------------------------------------------------------------
    def _catalog_digest(self, copy_to: Path | None = None) -> str | None:
        """sha256 of the catalog object as it is now (None: there is none yet), copying it to
        ``copy_to`` on the way."""
        digest = hashlib.sha256()
        path = f"{self.base}/{catalog.CATALOG_NAME}"
        try:
            if self.fs.get_file_info(path).type != pafs.FileType.File:
                return None
            with self.fs.open_input_stream(path) as src, contextlib.ExitStack() as stack:
                dst = stack.enter_context(copy_to.open("wb")) if copy_to else None
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    if dst is not None:
                        dst.write(chunk)
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(
                f"cannot read the store {self.uri}: {_first_line(exc)}", HINT
            ) from None
        return digest.hexdigest()

    def _download(self) -> str | None:
        """Copy the catalog object into the mirror; its digest (None when there is none)."""
        return self._catalog_digest(copy_to=self.root / catalog.CATALOG_NAME)

    def _upload(self, local: Path, rel: str) -> None:
        target = f"{self.base}/{rel}"
        try:
            with local.open("rb") as src, self.fs.open_output_stream(target) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(
                f"cannot write {self.location(rel)}: {_first_line(exc)}", HINT
            ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
