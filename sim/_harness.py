"""Verilog test wrapper that drives and checks a design's stream ports inside the HDL simulator.

:func:`harness_verilog` writes a module ``onnx2hw_tb`` around the converted design (module
``top``). Per clock cycle it does what the Python harnesses (:mod:`onnx2hw.sim.pysim`) do, with
the same cycle numbering, the same pause patterns (:class:`onnx2hw.sim._stream.Pause`: the
``"random"`` pattern is a xorshift32 sequence per port, seeded at run time) and the same checks:

* sources: input port ``P`` reads its packed transfers, one hexadecimal number a line, from
  ``in_P.hex`` in the simulator's working directory (``$fscanf``, one line ahead), and raises
  ``valid`` when its pause pattern allows and a transfer is left;
* sinks: ``ready`` is high when the expected count is reached or the pause pattern allows;
  every collected transfer is appended to ``out_P.hex`` (``$fwrite``);
* stream rules on every output: ``valid`` held and ``payload`` stable from ``valid & ~ready``
  until the transfer, no transfer beyond the expected count on a checked port;
* the run ends (``done`` rises) after ``drain`` cycles once every output has its transfers and
  every input transfer is consumed, or on a time-out, a deadlock (no transfer for
  ``idle_limit`` cycles) or a stream-rule violation (``err_code``, ``err_port``,
  ``err_cycle``, the payloads involved in ``err_*``).

Nothing about a run is in the Verilog: counts, limits, pause kinds and seeds are input ports
(``cfg_*``) set by the testbench before reset is released, the data are files. A design's
simulator build therefore serves every run. The cocotb testbench
(:mod:`onnx2hw.sim._cocotb_stream_tb`) sets the configuration, starts a clock implemented in the
simulator's C layer, releases reset and awaits ``done``: no Python runs per cycle.

Reset is high for the first two rising edges of the clock (made in the wrapper, see there).
Cycle ``c`` is the clock period that ends with rising edge ``c + 1`` after reset is released;
what the design sees in it is driven combinationally from the wrapper's state, and sampled at
that edge (the same moments as the Python harnesses' drive after the falling edge and sample in
the read-only phase).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ._stream import PortInfo, port_seed

__all__ = ["harness_verilog", "harness_config", "harness_result", "TB_TOP", "TB_MODULE", "ERRORS"]

TB_TOP = "onnx2hw_tb"
#: the cocotb testbench's module name: it runs as a top-level module copied into the run
#: directory (cocotb puts its working directory on the path), since imported as
#: ``onnx2hw.sim._cocotb_stream_tb`` it would import onnx2hw.sim and what that needs (amaranth,
#: ...) in every simulator run; part of a build's cache key
TB_MODULE = "onnx2hw_stream_tb"
#: err_code values
ERRORS = {0: None, 1: "timeout", 2: "deadlock", 3: "valid_drop", 4: "payload_changed", 5: "extra"}
PAUSE_CODES = {"none": 0, "3of4": 1, "random": 2}

_XORSHIFT = """  function [31:0] xs32(input [31:0] x);
    reg [31:0] y;
    begin
      y = x ^ (x << 13);
      y = y ^ (y >> 17);
      xs32 = y ^ (y << 5);
    end
  endfunction
"""


@dataclass
class _Parts:
    """Lines of the wrapper, gathered port by port and placed by :func:`_module`."""
    io: list[str] = field(default_factory=list)        # the wrapper's ports
    decl: list[str] = field(default_factory=list)      # per-port registers and wires
    inst: list[str] = field(default_factory=list)      # connections of the design instance
    init: list[str] = field(default_factory=list)      # `initial`: open files, read ahead
    drive: list[str] = field(default_factory=list)     # combinational valid/ready/payload
    reset: list[str] = field(default_factory=list)     # clocked, while in reset
    step_out: list[str] = field(default_factory=list)  # clocked: pause sequences, output checks
    step_in: list[str] = field(default_factory=list)   # clocked, if no error: input transfers
    fin: list[str] = field(default_factory=list)       # `flush_outputs` task
    alldone: list[str] = field(default_factory=list)   # terms of `finished`


def _pause(kind: str, k: int) -> str:
    """Whether port ``k``'s pause pattern (``cfg_src_kind`` or ``cfg_sink_kind``) allows this cycle."""
    return (f"({kind} == 2'd0 ? 1'b1 : {kind} == 2'd1 ? (cyc[1:0] == 2'd3) : "
            f"{kind} == 2'd2 ? lfsr{k}[31] : 1'b0)")


def _run_ports(pub: str) -> list[str]:
    """The wrapper's clock, run configuration and run result ports."""
    io = ["  input clk " + pub]
    for name in ("max_cycles", "idle_limit", "drain"):
        io.append(f"  input [63:0] cfg_{name} {pub}")
    io += [f"  input [1:0] cfg_src_kind {pub}", f"  input [1:0] cfg_sink_kind {pub}"]
    io += [f"  output reg done {pub}", f"  output reg [3:0] err_code {pub}",
           f"  output reg [15:0] err_port {pub}", f"  output reg [63:0] err_cycle {pub}",
           f"  output reg [63:0] cyc {pub}", f"  output reg [63:0] last_out {pub}",
           f"  output reg any_out {pub}", f"  output reg [63:0] done_at {pub}"]
    return io


def _any_port(parts: _Parts, k: int, p: PortInfo, w: int, pub: str) -> None:
    """What every stream port has: seed, stall count, pause sequence, connection to the design."""
    parts.io.append(f"  input [31:0] cfg_seed{k} {pub}")
    parts.io.append(f"  output reg [63:0] stalls{k} {pub}")
    parts.decl.append(f"  reg [31:0] lfsr{k};")
    parts.decl.append(f"  wire [{w - 1}:0] pay{k};")
    parts.decl.append(f"  wire valid{k}, ready{k};")
    parts.reset.append(f"      lfsr{k} <= xs32(cfg_seed{k});")
    parts.reset.append(f"      stalls{k} <= 64'd0;")
    parts.step_out.append(f"        lfsr{k} <= xs32(lfsr{k});")
    parts.inst += [f"    .{p.name}__payload(pay{k})", f"    .{p.name}__valid(valid{k})",
                   f"    .{p.name}__ready(ready{k})"]


def _source(parts: _Parts, k: int, p: PortInfo, w: int, pub: str) -> None:
    """An input port: transfers read from ``in_P.hex`` one line ahead, offered when the pause allows."""
    parts.io.append(f"  input [63:0] cfg_len{k} {pub}")
    parts.io.append(f"  output reg [63:0] idx{k} {pub}")
    parts.decl += [f"  reg [{w - 1}:0] next{k}, rd{k};", f"  reg holding{k};", f"  integer fi{k};"]
    parts.init += [f"    fi{k} = $fopen(\"in_{p.name}.hex\", \"r\");",
                   f"    rd{k} = {w}'d0;",
                   f"    if (fi{k} != 0) r = $fscanf(fi{k}, \"%h\\n\", rd{k});",
                   f"    next{k} = rd{k};"]
    parts.drive += [f"  wire more{k} = idx{k} < cfg_len{k};",
                    f"  assign valid{k} = holding{k} | (more{k} & {_pause('cfg_src_kind', k)});",
                    f"  assign pay{k} = next{k};"]
    parts.reset += [f"      idx{k} <= 64'd0;", f"      holding{k} <= 1'b0;"]
    parts.alldone.append(f"!more{k}")
    parts.step_in += [
        f"        if (valid{k} && ready{k}) begin",
        f"          idx{k} <= idx{k} + 64'd1;",
        f"          holding{k} <= 1'b0;",
        f"          any = 1'b1;",
        f"          if (fi{k} != 0) r = $fscanf(fi{k}, \"%h\\n\", rd{k});",
        f"          next{k} <= rd{k};",
        f"        end else begin",
        f"          holding{k} <= valid{k};",
        f"        end",
        f"        if (more{k} && !valid{k}) stalls{k} <= stalls{k} + 64'd1;"]


def _sink_check(k: int) -> list[str]:
    """Clocked lines of output port ``k``: the stream rules, then the transfer written to its file."""
    return [
        f"        if (!bad && stalled{k} && (!valid{k} || pay{k} !== held{k})) begin",
        f"          bad = 1'b1;",
        f"          err_code <= valid{k} ? 4'd4 : 4'd3;",
        f"          err_port <= 16'd{k};",
        f"          err_stalled{k} <= held{k};",
        f"          err_payload{k} <= pay{k};",
        f"        end else if (!bad && valid{k} && ready{k}) begin",
        f"          any = 1'b1;",
        f"          stalled{k} <= 1'b0;",
        f"          if (!full{k}) begin",
        f"            $fwrite(fo{k}, \"%h\\n\", pay{k});",
        f"            got{k} <= got{k} + 64'd1;",
        f"            last_out <= cyc;",
        f"            any_out <= 1'b1;",
        f"          end else if (cfg_checked{k}) begin",
        f"            bad = 1'b1;",
        f"            err_code <= 4'd5;",
        f"            err_port <= 16'd{k};",
        f"          end",
        f"        end else begin",
        f"          stalled{k} <= valid{k};",
        f"          held{k} <= pay{k};",
        f"        end",
        f"        if (!full{k} && !ready{k}) stalls{k} <= stalls{k} + 64'd1;"]


def _sink(parts: _Parts, k: int, p: PortInfo, w: int, pub: str) -> None:
    """An output port: ready when the pause allows or its count is reached, transfers checked and collected."""
    parts.io += [f"  input [63:0] cfg_want{k} {pub}", f"  input cfg_checked{k} {pub}",
                 f"  output reg [63:0] got{k} {pub}",
                 f"  output reg [{w - 1}:0] err_stalled{k} {pub}",
                 f"  output reg [{w - 1}:0] err_payload{k} {pub}"]
    parts.decl += [f"  reg stalled{k};", f"  reg [{w - 1}:0] held{k};", f"  integer fo{k};"]
    parts.init.append(f"    fo{k} = $fopen(\"out_{p.name}.hex\", \"w\");")
    parts.drive += [f"  wire full{k} = got{k} >= cfg_want{k};",
                    f"  assign ready{k} = full{k} | {_pause('cfg_sink_kind', k)};"]
    parts.reset += [f"      got{k} <= 64'd0;", f"      stalled{k} <= 1'b0;",
                    f"      held{k} <= {w}'d0;"]
    parts.alldone.append(f"full{k}")
    parts.step_out += _sink_check(k)
    parts.fin.append(f"    if (fo{k} != 0) $fflush(fo{k});")


def _module(parts: _Parts) -> list[str]:
    """Header, declarations, the reset maker, the combinational drive, the design instance, the
    file set-up and the flush task: everything before the clocked block."""
    finished = " && ".join(parts.alldone) if parts.alldone else "1'b1"
    lines = [f"// stream test wrapper written by onnx2hw.sim._harness",
             f"module {TB_TOP}(", ",\n".join(parts.io), ");", _XORSHIFT]
    lines += parts.decl
    lines += ["  reg [63:0] last_xfer;", "  reg done_seen;", "  integer r;", "  reg any, bad;",
              "  // reset for the first two rising edges, made here: a reset that is an input of the",
              "  // simulation model would make Verilator evaluate all logic that depends on it on",
              "  // every clock edge (its input-combinational region)",
              "  reg [1:0] rst_count = 2'd0;",
              "  wire rst = rst_count != 2'd2;",
              "  always @(posedge clk) if (rst) rst_count <= rst_count + 2'd1;"]
    lines += parts.drive
    lines += [f"  wire finished = {finished};"]
    lines += ["  top dut(", ",\n".join(parts.inst), "  );", "", "  initial begin"] + parts.init + ["  end", ""]
    lines += ["  task flush_outputs;", "  begin"] + parts.fin + ["  end", "  endtask", ""]
    return lines


def _clocked(parts: _Parts) -> list[str]:
    """The clocked block: reset, then per cycle the end conditions (time-out, deadlock, drained),
    the output checks and, if none failed, the input transfers and the cycle count."""
    lines = ["  always @(posedge clk) begin",
             "    any = 1'b0;",
             "    bad = 1'b0;",
             "    if (rst) begin",
             "      done <= 1'b0;", "      err_code <= 4'd0;", "      err_port <= 16'd0;",
             "      err_cycle <= 64'd0;", "      cyc <= 64'd0;", "      last_out <= 64'd0;",
             "      any_out <= 1'b0;", "      done_at <= 64'd0;", "      done_seen <= 1'b0;",
             "      last_xfer <= 64'd0;"]
    lines += parts.reset
    lines += ["    end else if (!done) begin",
              "      err_cycle <= cyc;",
              "      if (cyc >= cfg_max_cycles) begin",
              "        err_code <= 4'd1;", "        done <= 1'b1;", "        flush_outputs;",
              "      end else if (cyc - last_xfer > cfg_idle_limit) begin",
              "        err_code <= 4'd2;", "        done <= 1'b1;", "        flush_outputs;",
              "      end else if (finished && (done_seen ? cyc - done_at >= cfg_drain : cfg_drain == 64'd0)) begin",
              "        if (!done_seen) done_at <= cyc;",
              "        done <= 1'b1;", "        flush_outputs;",
              "      end else begin",
              "        if (finished && !done_seen) begin",
              "          done_at <= cyc;", "          done_seen <= 1'b1;",
              "        end"]
    lines += parts.step_out
    lines += ["        if (bad) begin", "          done <= 1'b1;", "          flush_outputs;",
              "        end else begin"]
    lines += ["  " + ln for ln in parts.step_in]
    lines += ["          if (any) last_xfer <= cyc;",
              "          cyc <= cyc + 64'd1;",
              "        end",
              "      end",
              "    end",
              "  end",
              "endmodule", ""]
    return lines


def harness_verilog(ports: dict[str, PortInfo], clk: bool, rst: bool) -> str:
    """The wrapper module for a design whose stream ports are ``ports`` (in the order the Python
    harnesses use: the same seeds and salts per port); ``clk``/``rst``: whether ``top`` has them."""
    pub = "/*verilator public_flat_rw*/"
    parts = _Parts(io=_run_ports(pub))
    if clk:
        parts.inst.append("    .clk(clk)")
    if rst:
        parts.inst.append("    .rst(rst)")
    for k, p in enumerate(ports.values()):
        w = p.width * p.lanes
        _any_port(parts, k, p, w, pub)
        (_source if p.is_input else _sink)(parts, k, p, w, pub)
    return "\n".join(_module(parts) + _clocked(parts))


def harness_config(ports: dict[str, PortInfo], *, lengths: dict, expect: dict, src_pause: str,
                   sink_pause: str, seed: int, max_cycles: int, drain: int, idle_limit: int) -> dict:
    """Values of the wrapper's ``cfg_*`` ports for one run (the seeds and salts per port of the
    Python harnesses: inputs 1, 3, 5, ..., outputs 2, 4, 6, ... in port order)."""
    cfg = {"cfg_max_cycles": int(max_cycles), "cfg_idle_limit": int(idle_limit), "cfg_drain": int(drain),
           "cfg_src_kind": PAUSE_CODES[src_pause], "cfg_sink_kind": PAUSE_CODES[sink_pause]}
    ins = outs = 0
    for k, (n, p) in enumerate(ports.items()):
        if p.is_input:
            cfg[f"cfg_seed{k}"] = port_seed(seed, 2 * ins + 1)
            cfg[f"cfg_len{k}"] = int(lengths.get(n, 0))
            ins += 1
        else:
            cfg[f"cfg_seed{k}"] = port_seed(seed, 2 * outs + 2)
            cfg[f"cfg_want{k}"] = int(expect.get(n, 0))
            cfg[f"cfg_checked{k}"] = int(n in expect)
            outs += 1
    return cfg


def harness_reads(ports: dict[str, PortInfo]) -> list[str]:
    """The wrapper's result ports the testbench reads once ``done`` rises."""
    names = ["err_code", "err_port", "err_cycle", "cyc", "last_out", "any_out", "done_at"]
    for k, p in enumerate(ports.values()):
        names += [f"stalls{k}"] + ([f"idx{k}"] if p.is_input else [f"got{k}", f"err_stalled{k}", f"err_payload{k}"])
    return names


def harness_result(ports: dict[str, PortInfo], r: dict, *, top: str, lengths: dict, expect: dict,
                   max_cycles: int, idle_limit: int) -> tuple[int | None, dict, str | None]:
    """``(cycles, stats, error)`` from the result ports ``r``: the cycles count of
    :func:`onnx2hw.sim.pysim.run_stream` (or ``None``), the pauses applied, and the harness's
    one-line error (``None`` if the run passed)."""
    names = list(ports)
    progress = {n: r[f"idx{k}"] if ports[n].is_input else r[f"got{k}"] for k, n in enumerate(names)}
    stats = {"cycles_run": r["cyc"], "stalls": {n: r[f"stalls{k}"] for k, n in enumerate(names)}}
    code = ERRORS[r["err_code"]]
    if code is None:
        return (r["last_out"] + 1 if r["any_out"] else r["done_at"]), stats, None
    prog = ", ".join([f"{n}: {progress[n]}/{expect[n]} out" for n in names
                      if not ports[n].is_input and n in expect]
                     + [f"{n}: {progress[n]}/{lengths[n]} in" for n in names
                        if ports[n].is_input and lengths.get(n)])
    k, cyc = r["err_port"], r["err_cycle"]
    name = names[k]
    if code == "timeout":
        msg = f"timeout after {max_cycles} cycles ({prog})"
    elif code == "deadlock":
        msg = f"deadlock: no transfer for {idle_limit} cycles at cycle {cyc} ({prog})"
    elif code == "valid_drop":
        msg = f"{name}.valid dropped before transfer {progress[name]} at cycle {cyc}"
    elif code == "payload_changed":
        was, now = r[f"err_stalled{k}"], r[f"err_payload{k}"]
        msg = (f"{name}.payload changed while stalled (transfer {progress[name]}, "
               f"cycle {cyc}: {was:#x} -> {now:#x})")
    else:
        msg = (f"{name} produced more than the expected {expect[name]} transfers "
               f"(extra transfer at cycle {cyc})")
    return None, stats, f"{top}: {msg}"
