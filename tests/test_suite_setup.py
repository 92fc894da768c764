"""The test command itself: what it skips, and that it says why (the README's promise)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.render import test_report_html

CONFTEST = Path(__file__).with_name("conftest.py")
SUITE = """
import pytest

@pytest.mark.slow
def test_long():
    pass

def test_quick():
    pass
"""


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, slow: str | None):
    if slow is None:
        monkeypatch.delenv("MISMATCHCTL_SLOW_TESTS", raising=False)
    else:
        monkeypatch.setenv("MISMATCHCTL_SLOW_TESTS", slow)
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.makepyfile(SUITE)
    return pytester.runpytest("-ra")


def test_slow_tests_are_skipped_with_the_way_to_run_them(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(pytester, monkeypatch, None)
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["SKIPPED*slow end-to-end test: run with MISMATCHCTL_SLOW_TESTS=1*"]
    )


def test_slow_tests_run_when_asked(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(pytester, monkeypatch, "1").assert_outcomes(passed=2)


def test_a_missing_chromium_is_reported_with_the_install_command() -> None:
    (mark,) = [
        m for m in test_report_html.NEEDS_CHROMIUM.mark.kwargs.values() if isinstance(m, str)
    ]
    assert "apt-get install chromium" in mark


def test_torch_threads_wait_without_spinning(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The suite's conftest sets OMP_WAIT_POLICY=PASSIVE unless the environment sets it: torch's
    OpenMP threads spinning between the tiny models' operations cost more CPU than the work."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(
        "import os\n\ndef test_policy():\n    assert os.environ['OMP_WAIT_POLICY'] == 'PASSIVE'\n"
    )
    pytester.runpytest().assert_outcomes(passed=1)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    pytester.makepyfile(
        "import os\n\ndef test_policy():\n    assert os.environ['OMP_WAIT_POLICY'] == 'ACTIVE'\n"
    )
    pytester.runpytest().assert_outcomes(passed=1)
