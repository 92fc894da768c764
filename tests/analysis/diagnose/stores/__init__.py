"""The dumps the diagnose tests read, one module per family (built once per test session by
``conftest.py``)."""
