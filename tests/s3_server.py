"""An S3-compatible server on loopback (moto) for the object-storage tests, and its environment.

pyarrow (and so mismatchctl) reads ``AWS_ENDPOINT_URL``; the credentials are moto's dummies."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HAS_MOTO = importlib.util.find_spec("moto") is not None
BUCKET = "dumps"


@contextmanager
def s3_server() -> Iterator[dict[str, str]]:
    """Start moto on 127.0.0.1 (a free port), set the AWS_* variables, create BUCKET; yield the
    variables; restore the environment and stop the server afterwards."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        bucket_fs(allow_bucket_creation=True).create_dir(BUCKET)
        yield env
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def bucket_fs(**options: Any) -> Any:
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(
        endpoint_override=os.environ["AWS_ENDPOINT_URL"],
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
        **options,
    )


def upload(local: Path, key: str) -> str:
    """Copy a local file to s3://BUCKET/key; its URI."""
    with bucket_fs().open_output_stream(f"{BUCKET}/{key}") as out:
        out.write(local.read_bytes())
    return f"s3://{BUCKET}/{key}"
