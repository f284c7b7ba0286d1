"""Verilog of Amaranth components for the HDL simulators.

A component converts to one module ``top`` with ports ``<port>__payload/__valid/__ready``,
``clk`` and ``rst``. A whole model takes seconds to convert and a simulation runs the same
component several times, so :func:`verilog_once` converts each component object once.
:func:`hardware_text` drops the source-location attributes: equal hardware gives equal text
(what the simulator build cache keys on).
"""
from __future__ import annotations

import contextlib
import re
import weakref

from amaranth.back import verilog

__all__ = ["verilog_for", "verilog_once", "SRC_ATTR", "strip_src", "hardware_text"]

#: a source-location attribute of Amaranth's Verilog (``(* src = "file:line" *)``)
SRC_ATTR = re.compile(r"\(\* src = \"[^\"]*\" \*\)")

_CONVERTED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def verilog_for(component, name: str = "top") -> str:
    """The Verilog of ``component`` as module ``name`` (converted anew at each call)."""
    return verilog.convert(component, name=name)


def verilog_once(component) -> str:
    """The Verilog of ``component``, converted once per component object."""
    try:
        return _CONVERTED[component]
    except (KeyError, TypeError):
        pass
    text = verilog_for(component)
    with contextlib.suppress(TypeError):
        _CONVERTED[component] = text
    return text


def strip_src(text: str) -> str:
    """Verilog ``text`` without its source-location attributes."""
    return SRC_ATTR.sub("", text)


def hardware_text(component) -> str:
    """The component's Verilog without source-location attributes: equal for equal hardware
    (what the simulator cache keys on)."""
    return strip_src(verilog_once(component))
