"""C90 identifier checks and HDL-safe name mapping."""
from __future__ import annotations

import re

import pytest

from onnx2hw.ir import Sanitizer, is_c90_identifier, sanitize
from onnx2hw.ir.names import VERILOG_KEYWORDS

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@pytest.mark.parametrize("name,ok", [("x", True), ("_a1", True), ("input.1", False), ("/conv1/Conv_output_0", False),
                                     ("1x", False), ("", False), ("int", False), ("wire", True), ("a-b", False)])
def test_is_c90_identifier(name, ok):
    assert is_c90_identifier(name) is ok


@pytest.mark.parametrize("name,want", [("input.1", "input_1"), ("/conv1/Conv_output_0", "conv1_Conv_output_0"),
                                       ("1x", "v_1x"), ("", "v_"), ("wire", "wire_"), ("module", "module_"),
                                       ("int", "int_"), ("a__b", "a_b"), ("ok_name", "ok_name"), ("Ünï", "n")])
def test_sanitize(name, want):
    assert sanitize(name) == want


def test_sanitizer_unique_stable_and_keyword_free():
    s = Sanitizer(reserved=["clk", "rst"])
    names = ["input.1", "input_1", "input/1", "clk", "wire", "Wire", "x", "X", "input.1"]
    out = [s(n) for n in names]
    assert out[0] == out[-1] == "input_1"  # stable
    assert len(set(out[:-1])) == len(names) - 1  # unique
    assert len({o.lower() for o in out[:-1]}) == len(names) - 1  # unique ignoring case
    for o in out:
        assert IDENT.match(o) and o not in VERILOG_KEYWORDS and o.lower() not in {"clk", "rst"}
    assert s.mapping()["clk"] == "clk_1"


def test_sanitize_type_error():
    with pytest.raises(TypeError, match="name must be a str"):
        sanitize(3)
