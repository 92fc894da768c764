"""What the family generator's tests need before importing it (sample_data/gen/family_*.py):
torch, transformers and tokenizers (the module is skipped without them), torch's threads left
passive, and sample_data/ on the import path."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"


def family_deps() -> ModuleType:
    """torch, once transformers and tokenizers are there too (else the calling module is
    skipped), with sample_data/ first on the path; call it before importing ``gen``."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its thread pool
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    if str(SAMPLE) not in sys.path:
        sys.path.insert(0, str(SAMPLE))
    return torch
