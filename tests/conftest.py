"""Shared pytest hooks: ``summary`` lets a test add a line to the end-of-run report."""
from __future__ import annotations

import pytest

_LINES: dict[str, str] = {}


@pytest.fixture(scope="session")
def summary():
    """``summary(key, line)`` sets one line printed in the terminal summary."""
    def add(key: str, line: str) -> None:
        _LINES[key] = line
    return add


def pytest_terminal_summary(terminalreporter):
    if _LINES:
        terminalreporter.section("onnx2hw summary")
        for line in _LINES.values():
            terminalreporter.write_line(line)
