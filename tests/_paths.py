"""Locations the tests read, independent of the directory pytest runs from."""
from pathlib import Path

#: the repository root (parent of ``tests/``)
ROOT = Path(__file__).resolve().parent.parent
#: the bundled example models and data
EXAMPLES = ROOT / "examples"
