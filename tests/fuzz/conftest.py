"""Fuzzing: the security tests' support module is importable from here too (`import
security_support`), and the schemathesis case count is printed in the terminal summary."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

_SECURITY = str(Path(__file__).resolve().parents[1] / "security")
if _SECURITY not in sys.path:
    sys.path.insert(0, _SECURITY)

_CASES: defaultdict[str, Counter[int]] = defaultdict(Counter)


@pytest.fixture(scope="session")
def schemathesis_cases() -> defaultdict[str, Counter[int]]:
    """Calls made by the schemathesis run: operation -> response status -> count (reported at the end)."""
    return _CASES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _CASES:
        return
    total = sum(n for statuses in _CASES.values() for n in statuses.values())
    terminalreporter.write_sep("-", f"schemathesis: {total} generated cases over {len(_CASES)} operations")
    for label, statuses in sorted(_CASES.items()):
        spread = ", ".join(f"{status}: {n}" for status, n in sorted(statuses.items()))
        terminalreporter.write_line(f"  {sum(statuses.values()):5d}  {label}  ({spread})")
