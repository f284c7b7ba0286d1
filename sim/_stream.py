"""Helpers shared by the Amaranth-simulator and cocotb stream harnesses.

Payload packing follows Amaranth's ``data.ArrayLayout``: lane ``j`` of a transfer occupies
bits ``[j*w, (j+1)*w)`` of the flat payload. Pause patterns are deterministic for a seed
so the two harnesses drive identical valid/ready sequences.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Elaboratable, Shape
from amaranth.lib import data, stream, wiring

PAUSES = ("none", "3of4", "random")


@dataclass(frozen=True)
class PortInfo:
    """Element shape and lane count of one stream port's payload."""

    name: str
    is_input: bool
    width: int
    signed: bool
    lanes: int

    @property
    def lo(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def hi(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1


def stream_ports(component) -> dict[str, PortInfo]:
    """Every ``stream.Signature`` port of an Amaranth component, by name."""
    ports = {}
    for name, member in component.signature.members.items():
        if not (member.is_signature and isinstance(member.signature, stream.Signature)):
            continue
        iface = getattr(component, name)
        payload = iface.payload
        if isinstance(payload, data.View):
            layout = payload.shape()
            if isinstance(layout, data.ArrayLayout):
                elem = Shape.cast(layout.elem_shape)
                info = PortInfo(name, member.flow == wiring.In, elem.width, elem.signed,
                                layout.length)
            else:
                info = PortInfo(name, member.flow == wiring.In, layout.size, False, 1)
        else:
            shape = payload.shape()
            info = PortInfo(name, member.flow == wiring.In, shape.width, shape.signed, 1)
        if info.width < 1:
            raise ValueError(f"port {name!r} has a zero-width payload element")
        ports[name] = info
    return ports


def as_transfers(name: str, arr, info: PortInfo) -> np.ndarray:
    """Validate a feed for ``info`` and return it as a ``(transfers, lanes)`` int64 array."""
    a = np.asarray(arr)
    if a.dtype.kind not in "iub":
        raise TypeError(f"feed {name!r} must be an integer array, not dtype {a.dtype!r}")
    a = a.astype(np.int64)
    if a.ndim == 1 and info.lanes == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[1] != info.lanes:
        raise ValueError(f"feed {name!r} must have shape (transfers, {info.lanes}), "
                         f"not {a.shape!r}")
    if a.size and (a.min() < info.lo or a.max() > info.hi):
        raise ValueError(f"feed {name!r} has values outside [{info.lo}, {info.hi}] "
                         f"(min {int(a.min())!r}, max {int(a.max())!r})")
    return a


def pack(a: np.ndarray, info: PortInfo) -> list[int]:
    """Flat payload integers (unsigned) for each row of ``a``."""
    mask = (1 << info.width) - 1
    out = []
    for row in a.tolist():
        v = 0
        for j, x in enumerate(row):
            v |= (x & mask) << (j * info.width)
        out.append(v)
    return out


def unpack(values: list[int], info: PortInfo) -> np.ndarray:
    """Inverse of :func:`pack`; signed lanes are sign-extended. Returns int64 ``(n, lanes)``."""
    w, mask = info.width, (1 << info.width) - 1
    rows = []
    for v in values:
        row = []
        for j in range(info.lanes):
            x = (v >> (j * w)) & mask
            if info.signed and x >> (w - 1):
                x -= 1 << w
            row.append(x)
        rows.append(row)
    return np.array(rows, dtype=np.int64).reshape(len(values), info.lanes)


def pack_hex(a: np.ndarray, info: PortInfo) -> str:
    """The rows of ``a`` as flat payloads (:func:`pack`), one hexadecimal number a line."""
    w = info.width * info.lanes
    if w <= 64 and len(a):
        lanes = (np.asarray(a, dtype=np.int64).astype(np.uint64) & np.uint64((1 << info.width) - 1))
        flat = np.zeros(len(a), dtype=np.uint64)
        for j in range(info.lanes):
            flat |= lanes[:, j] << np.uint64(j * info.width)
        return "".join(f"{v:x}\n" for v in flat.tolist())
    return "".join(f"{v:x}\n" for v in pack(a, info))


def unpack_hex(text: str, info: PortInfo) -> np.ndarray:
    """Inverse of :func:`pack_hex` (int64 ``(n, lanes)``, signed lanes sign-extended)."""
    words = text.split()
    w, mask = info.width, (1 << info.width) - 1
    if w * info.lanes <= 64 and words:
        flat = np.array([int(x, 16) for x in words], dtype=np.uint64)
        out = np.empty((len(words), info.lanes), dtype=np.int64)
        for j in range(info.lanes):
            lane = ((flat >> np.uint64(j * w)) & np.uint64(mask)).astype(np.int64)
            if info.signed:
                lane = np.where(lane >> (w - 1) != 0, lane - (1 << w), lane)
            out[:, j] = lane
        return out
    return unpack([int(x, 16) for x in words], info)


def transfer_words(info: PortInfo) -> int:
    """32-bit words of one flat payload in the native harness's files: Verilator's layout of a
    port of that width (one word up to 32 bits, two up to 64, ``ceil(w / 32)`` above)."""
    w = info.width * info.lanes
    return 1 if w <= 32 else 2 if w <= 64 else (w + 31) // 32


def pack_words(a: np.ndarray, info: PortInfo) -> bytes:
    """The rows of ``a`` as flat payloads (:func:`pack`), each as :func:`transfer_words`
    little-endian 32-bit words, least significant first."""
    n = transfer_words(info)
    if info.width * info.lanes <= 64:
        lanes = np.asarray(a, dtype=np.int64).reshape(len(a), info.lanes).astype(np.uint64)
        lanes &= np.uint64((1 << info.width) - 1)
        flat = np.zeros(len(a), dtype=np.uint64)
        for j in range(info.lanes):
            flat |= lanes[:, j] << np.uint64(j * info.width)
        return (flat.astype("<u4") if n == 1 else flat.astype("<u8")).tobytes()
    return b"".join(v.to_bytes(4 * n, "little") for v in pack(a, info))


def unpack_words(raw: bytes, info: PortInfo) -> np.ndarray:
    """Inverse of :func:`pack_words` (int64 ``(n, lanes)``, signed lanes sign-extended)."""
    n = transfer_words(info)
    w, mask = info.width, (1 << info.width) - 1
    if w * info.lanes <= 64:
        flat = np.frombuffer(raw, dtype="<u4" if n == 1 else "<u8").astype(np.uint64)
        out = np.empty((len(flat), info.lanes), dtype=np.int64)
        for j in range(info.lanes):
            lane = ((flat >> np.uint64(j * w)) & np.uint64(mask)).astype(np.int64)
            if info.signed:
                lane = np.where(lane >> (w - 1) != 0, lane - (1 << w), lane)
            out[:, j] = lane
        return out
    size = 4 * n
    return unpack([int.from_bytes(raw[i:i + size], "little") for i in range(0, len(raw), size)], info)


def as_component(dut):
    """The component itself, or the one its factory makes."""
    if not isinstance(dut, Elaboratable):
        if not callable(dut):
            raise TypeError(f"expected an Amaranth component or a factory, not {dut!r}")
        dut = dut()
    return dut


def xorshift32(x: int) -> int:
    """One step of Marsaglia's xorshift32 (the wrapper's ``xs32``)."""
    x ^= (x << 13) & 0xFFFFFFFF
    x ^= x >> 17
    x ^= (x << 5) & 0xFFFFFFFF
    return x


def port_seed(seed: int, salt: int) -> int:
    """Non-zero 32-bit xorshift seed of one port's ``"random"`` pattern (splitmix64 of the run's
    seed and the port's salt)."""
    z = ((((seed & 0xFFFFFFFF) << 20) ^ salt) + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
    z ^= z >> 31
    return (z & 0xFFFFFFFF) or 1


class Pause:
    """Per-cycle "may act" decisions for one port.

    ``"none"``: always; ``"3of4"``: one cycle in four (three in four paused);
    ``"random"``: a 50 % coin flip per cycle, bit 31 of a xorshift32 sequence seeded with
    :func:`port_seed` (state for cycle 0: one step from the seed). The Verilog wrapper of the
    cocotb harness (:mod:`onnx2hw.sim._harness`) computes the same sequence in hardware.
    """

    def __init__(self, kind: str, seed: int, salt: int):
        if kind not in PAUSES:
            raise ValueError(f"pause pattern must be one of {PAUSES!r}, not {kind!r}")
        self.kind = kind
        self.seed = port_seed(seed, salt)
        self._state = self.seed
        self._buf: list[bool] = []

    def __call__(self, cycle: int) -> bool:
        if self.kind == "none":
            return True
        if self.kind == "3of4":
            return cycle % 4 == 3
        buf, x = self._buf, self._state
        while cycle >= len(buf):
            x = xorshift32(x)
            buf.append(bool(x >> 31))
        self._state = x
        return buf[cycle]


def check_names(ports: dict[str, PortInfo], feeds: dict, expect: dict) -> None:
    for name in feeds:
        if name not in ports or not ports[name].is_input:
            raise ValueError(f"feed {name!r} is not an input stream port "
                             f"(inputs: {sorted(n for n, p in ports.items() if p.is_input)!r})")
    for name, n in expect.items():
        if name not in ports or ports[name].is_input:
            outputs = sorted(n for n, p in ports.items() if not p.is_input)
            raise ValueError(f"expect {name!r} is not an output stream port "
                             f"(outputs: {outputs!r})")
        if not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"expect[{name!r}] must be a transfer count >= 0, not {n!r}")


def default_max_cycles(feeds: dict[str, np.ndarray], expect: dict[str, int]) -> int:
    n = sum(len(a) for a in feeds.values()) + sum(int(v) for v in expect.values())
    return 4096 + 64 * n


def observe_sink(name: str, cyc: int, valid, payload, ready, got: list, want: int, stalled,
                 checked: bool, fail):
    """One cycle of an output stream, shared by both harnesses.

    Checks the stream rules against ``stalled`` (the payload seen with ``valid & ~ready`` last
    cycle, or ``None``), collects a transfer into ``got`` up to ``want``, and reports any
    transfer beyond it when the port is ``checked``. Returns ``(transferred, stalled,
    collected)`` for the next cycle.
    """
    if stalled is not None:
        if not valid:
            fail(f"{name}.valid dropped before transfer {len(got)} at cycle {cyc}")
        if payload != stalled:
            fail(f"{name}.payload changed while stalled (transfer {len(got)}, "
                 f"cycle {cyc}: {stalled:#x} -> {payload:#x})")
    if valid and ready:
        if len(got) >= want:
            if checked:
                fail(f"{name} produced more than the expected {want} transfers (extra transfer at cycle {cyc})")
            return True, None, False
        got.append(payload)
        return True, None, True
    return False, (payload if valid else None), False
