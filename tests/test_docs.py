"""The documents the code cites are in the repository (docs/architecture.md is the design)."""
from __future__ import annotations

import re

import pytest

from _paths import ROOT

#: documents of other projects the code names as such (the ONNX specification's pages)
UPSTREAM = {"IR.md", "ExternalData.md", "quant_op.md"}
_CITED = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.md)\b")
_SOURCES = ["onnx2hw", "sim", "boards", "bench", "tests", "corpus", "examples", "benchmarks"]


def _citations():
    for top in _SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            yield from ((path, n) for n in _CITED.findall(path.read_text(encoding="utf-8")) if n not in UPSTREAM)
    for path in (ROOT / "pyproject.toml", ROOT / "Makefile"):
        yield from ((path, n) for n in _CITED.findall(path.read_text(encoding="utf-8")) if n not in UPSTREAM)


def test_architecture_document_is_in_the_repository():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "## 2. The layer registry" in text and "oracle policy" in text


@pytest.mark.parametrize("path,name", list(_citations()), ids=lambda v: getattr(v, "name", v))
def test_cited_document_exists(path, name):
    here = [path.parent / name, ROOT / name, ROOT / "docs" / name]
    assert any(p.is_file() for p in here), f"{path.relative_to(ROOT)} cites {name}, which is not in the repository"
