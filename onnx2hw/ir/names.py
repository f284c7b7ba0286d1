"""Identifier rules: C90 names (what the ONNX spec asks for) and HDL-safe names.

ONNX only *recommends* C90 identifiers; exporters produce names such as
PyTorch's ``input.1`` or ``/conv1/Conv_output_0``. The loader accepts them
(with a warning); later HDL stages map every name through a :class:`Sanitizer`.
"""
from __future__ import annotations

import re

__all__ = ["is_c90_identifier", "sanitize", "Sanitizer", "FreshNames", "C90_KEYWORDS", "VERILOG_KEYWORDS"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

#: the 32 keywords of ISO C90; a keyword is not an identifier
C90_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if int
long register return short signed sizeof static struct switch typedef union unsigned void
volatile while""".split())

#: Verilog-2005 and SystemVerilog-2017 reserved words (names we must never emit)
VERILOG_KEYWORDS = frozenset("""
accept_on alias always always_comb always_ff always_latch and assert assign assume automatic
before begin bind bins binsof bit break buf bufif0 bufif1 byte case casex casez cell chandle
checker class clocking cmos config const constraint context continue cover covergroup
coverpoint cross deassign default defparam design disable dist do edge else end endcase
endchecker endclass endclocking endconfig endfunction endgenerate endgroup endinterface
endmodule endpackage endprimitive endprogram endproperty endspecify endsequence endtable
endtask enum event eventually expect export extends extern final first_match for force
foreach forever fork forkjoin function generate genvar global highz0 highz1 if iff ifnone
ignore_bins illegal_bins implements implies import incdir include initial inout input inside
instance int integer interconnect interface intersect join join_any join_none large let
liblist library local localparam logic longint macromodule matches medium modport module
nand negedge nettype new nexttime nmos nor noshowcancelled not notif0 notif1 null or output
package packed parameter pmos posedge primitive priority program property protected pull0
pull1 pulldown pullup pulsestyle_ondetect pulsestyle_onevent pure rand randc randcase
randsequence rcmos real realtime ref reg reject_on release repeat restrict return rnmos
rpmos rtran rtranif0 rtranif1 s_always s_eventually s_nexttime s_until s_until_with
scalared sequence shortint shortreal showcancelled signed small soft solve specify
specparam static string strong strong0 strong1 struct super supply0 supply1 sync_accept_on
sync_reject_on table tagged task this throughout time timeprecision timeunit tran tranif0
tranif1 tri tri0 tri1 triand trior trireg type typedef union unique unique0 unsigned until
until_with untyped use uwire var vectored virtual void wait wait_order wand weak weak0 weak1
while wildcard wire with within wor xnor xor""".split())

_RESERVED = C90_KEYWORDS | VERILOG_KEYWORDS


def is_c90_identifier(name: str) -> bool:
    """True when ``name`` follows the C90 identifier syntax and is not a C keyword."""
    return bool(_IDENT.match(name)) and name not in C90_KEYWORDS


def sanitize(name: str) -> str:
    """Map ``name`` to a C/Verilog identifier (not necessarily unique).

    Every character outside ``[A-Za-z0-9_]`` becomes ``_``, leading and repeated
    underscores are collapsed, a leading digit or an empty result gets a ``v_``
    prefix, and a C or Verilog keyword gets a ``_`` suffix. Use a
    :class:`Sanitizer` when the results must be unique.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {name!r}")
    text = re.sub(r"[^A-Za-z0-9_]", "_", name)
    text = re.sub(r"_+", "_", text).strip("_")
    if not text or text[0].isdigit():
        text = "v_" + text
    if text in _RESERVED or text.lower() in _RESERVED:
        text += "_"
    return text


class Sanitizer:
    """Unique, stable mapping of arbitrary names to HDL-safe identifiers.

    ``s(name)`` always returns the same identifier for the same ``name`` and
    never the same identifier for two different names; collisions get a
    ``_1``, ``_2``... suffix. ``reserved`` names are never produced. Verilog
    is case-sensitive, but some tools are not, so uniqueness is checked
    case-insensitively.
    """

    def __init__(self, reserved=()):
        self._map: dict[str, str] = {}
        self._taken: set[str] = {sanitize(r).lower() for r in reserved} | {r.lower() for r in reserved}

    def __call__(self, name: str) -> str:
        if name in self._map:
            return self._map[name]
        base = sanitize(name)
        candidate, i = base, 0
        while candidate.lower() in self._taken:
            i += 1
            candidate = f"{base}_{i}"
        self._taken.add(candidate.lower())
        self._map[name] = candidate
        return candidate

    def mapping(self) -> dict[str, str]:
        """Every name mapped so far -> its identifier."""
        return dict(self._map)


class FreshNames:
    """Fresh value names that collide with nothing in a graph (``graph``: an
    :class:`~onnx2hw.ir.Graph`: its initializers, inputs, outputs and node values are taken)."""

    def __init__(self, graph):
        self.used = set(graph.initializers) | set(graph.input_names) | set(graph.output_names)
        for n in graph.nodes:
            self.used.update(n.inputs)
            self.used.update(n.outputs)

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name
