"""The host link's framing, shared by the board's hardware (:mod:`onnx2hw.rtl.framing`,
:mod:`onnx2hw.rtl.board_top`) and every host transport (:mod:`onnx2hw.driver`).

A leaf module: it imports nothing from onnx2hw, so every layer may import it.

Frame (both directions)::

    A5 5A | type | session (2 bytes, little-endian) | seq | count | payload ... | CRC-32 (4 bytes, little-endian)

The CRC is CRC-32/Ethernet (``zlib.crc32``) over ``type``, ``session``, ``seq``, ``count`` and the
payload. A receiver that meets bytes outside a frame (noise, the tail of a frame it did not see
start, a frame that failed a check) hunts for the next magic ``A5 5A`` and reads on from there.

* ``session`` (1..65535) is chosen by the host when it opens the link (at random, and never the
  same as its previous one) and carried in every frame it sends; the board echoes in each reply
  the session of the frame it answers. Replies of any other session (an earlier, interrupted
  run still draining from the board) are recognised and dropped by the host. ``0``
  (:data:`NO_SESSION`) is never chosen by a host: the board reports it in an ERROR frame whose
  offending header was not read as far as its session.
* host -> board ``DATA`` (0x01): ``count`` inferences (1..``max_batch``), payload
  ``count * in_bytes``.
* board -> host ``RESULT`` (0x81): same ``session``, ``seq`` and ``count``, payload
  ``count * out_bytes``.
* host -> board ``SELFTEST`` (0x02), only to a board built with a self-test
  (:mod:`onnx2hw.rtl.selftest`): ``count`` = 1, payload :data:`SELFTEST_CMD_BYTES` bytes
  (:func:`encode_selftest_command`: passes ``R`` and the CRC-32 one pass of outputs must have).
  The board waits until the accelerator is idle, replays the inputs held in its memory ``R``
  times back to back at full speed, and answers with
* board -> host ``SELFTEST_RESULT`` (0x82): same ``session`` and ``seq``, ``count`` = 1, payload
  :data:`SELFTEST_RESULT_BYTES` bytes (:class:`SelfTestCounts`).
* board -> host ``ERROR`` (0xEE): ``session`` and ``seq`` of the offending frame (``0`` /
  ``0xFF`` if that part of its header was not read), ``count`` = error code
  (:data:`ERROR_CODES`), no payload. A frame that fails any check is dropped whole by the board
  and never reaches the accelerator.

Element coding: every element takes ``ceil(bits / 8)`` bytes, little-endian two's complement
(signed) or plain binary (unsigned); a bipolar input (-1/+1) is coded as 0/1. Tensors are in
NHWC order, as the accelerator streams them.

A model with several inputs (outputs) sends them one after the other in each inference's
payload, in graph order (:class:`LinkPart`: name, shape and type of each). The stream's elements
then have one common type, the narrowest that holds every value of each tensor's own type
(:func:`common_type`: signed if any is, one bit more for an unsigned tensor among signed ones),
and each value is coded in it: one element coding for the whole stream, so the board's framing
and self-test treat one stream whatever it carries.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, replace

import numpy as np

__all__ = ["MAGIC", "T_DATA", "T_RESULT", "T_ERROR", "T_SELFTEST", "T_SELFTEST_RESULT", "SELFTEST_CMD_BYTES",
           "SELFTEST_RESULT_BYTES", "encode_selftest_command", "SelfTestCounts", "ERROR_CODES", "E_CRC", "E_TYPE", "E_COUNT",
           "E_OVERFLOW", "E_TIMEOUT", "HEADER_BYTES", "CRC_BYTES", "NO_SEQ", "NO_SESSION", "LinkFormat",
           "LinkPart", "common_type", "join_tensors", "split_tensors", "link_format", "encode_frame", "Frame",
           "FrameParser", "crc32", "TAG_DEPTH"]

MAGIC = b"\xA5\x5A"
T_DATA, T_RESULT, T_ERROR = 0x01, 0x81, 0xEE
T_SELFTEST, T_SELFTEST_RESULT = 0x02, 0x82
#: SELFTEST payload: passes (uint32), expected CRC-32 of one pass of outputs (uint32)
SELFTEST_CMD_BYTES = 8
#: SELFTEST_RESULT payload: cycles (uint64), latency cycles, inferences, failed passes, CRC-32 of
#: the first pass (uint32 each), all little-endian
SELFTEST_RESULT_BYTES = 24
E_CRC, E_TYPE, E_COUNT, E_OVERFLOW, E_TIMEOUT = 1, 2, 3, 4, 5
ERROR_CODES = {E_CRC: "CRC mismatch", E_TYPE: "unknown frame type", E_COUNT: "bad inference count",
               E_OVERFLOW: "input buffer full", E_TIMEOUT: "frame truncated (byte time-out)"}
#: magic, type, session (2), seq, count
HEADER_BYTES, CRC_BYTES = 7, 4
NO_SEQ = 0xFF
NO_SESSION = 0
#: frames the board queues (committed, result not yet sent) at most
TAG_DEPTH = 16


def crc32(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def _elem_bytes(bits: int) -> int:
    return (int(bits) + 7) // 8


def _positive(name: str, v) -> int:
    if isinstance(v, bool) or int(v) != v or v < 1:
        raise ValueError(f"{name} must be a positive int, not {v!r}")
    return int(v)


def common_type(types) -> tuple[int, bool]:
    """``(bits, signed)`` of the narrowest element type holding every value of each of
    ``types`` (``(bits, signed)`` pairs): signed if any is; an unsigned type among signed ones
    needs one bit more."""
    types = [(int(b), bool(s)) for b, s in types]
    signed = any(s for _, s in types)
    return max(b + (signed and not s) for b, s in types), signed


@dataclass(frozen=True)
class LinkPart:
    """One tensor of a stream that carries several one after the other: its ``name`` (the
    accelerator's tensor), NHWC ``shape`` of one inference and element type (``bits``,
    ``signed``; a bipolar tensor is coded as 1-bit unsigned)."""

    name: str
    shape: tuple
    bits: int
    signed: bool

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "bits", _positive("bits", self.bits))
        object.__setattr__(self, "signed", bool(self.signed))

    @property
    def elems(self) -> int:
        return int(np.prod(self.shape))

    @property
    def range(self) -> tuple[int, int]:
        """The values of the element type."""
        if self.signed:
            return -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        return 0, (1 << self.bits) - 1

    def describe(self) -> dict:
        """JSON-ready (see :meth:`from_describe`)."""
        return {"tensor": self.name, "shape": list(self.shape), "bits": self.bits, "signed": self.signed}

    @classmethod
    def from_describe(cls, d: dict) -> "LinkPart":
        return cls(str(d["tensor"]), tuple(d["shape"]), int(d["bits"]), bool(d["signed"]))


@dataclass(frozen=True)
class LinkFormat:
    """Byte layout of one inference on the link: element shapes, widths and stream lanes of the
    accelerator's input and output (see :meth:`create`, or :func:`link_format` for a
    ``Pipeline.describe()`` dictionary).

    ``max_batch`` is the most inferences one DATA frame may carry and ``buffer_bytes`` the
    board's input buffer (power of two, at least two full frames). ``in_parts``/``out_parts``
    list the tensors a stream carries one after the other when it carries several (see
    :meth:`of_parts`); empty, the stream is one tensor of ``in_shape``/``out_shape``.
    """

    in_shape: tuple
    in_bits: int
    in_signed: bool
    in_lanes: int
    out_shape: tuple
    out_bits: int
    out_signed: bool
    out_lanes: int
    max_batch: int
    buffer_bytes: int
    in_parts: tuple = ()
    out_parts: tuple = ()

    @classmethod
    def create(cls, *, in_shape, in_bits: int, in_signed: bool, in_lanes: int, out_shape, out_bits: int,
               out_signed: bool, out_lanes: int) -> "LinkFormat":
        """The layout of an accelerator with these ports; ``max_batch`` and ``buffer_bytes``
        follow from the input size."""
        in_shape, out_shape = tuple(int(d) for d in in_shape), tuple(int(d) for d in out_shape)
        for name, v in (("in_bits", in_bits), ("out_bits", out_bits), ("in_lanes", in_lanes),
                        ("out_lanes", out_lanes)):
            _positive(name, v)
        in_bytes = int(np.prod(in_shape)) * _elem_bytes(in_bits)
        max_batch = max(1, min(32, 1024 // in_bytes))
        need = 2 * max_batch * in_bytes
        return cls(in_shape=in_shape, in_bits=int(in_bits), in_signed=bool(in_signed), in_lanes=int(in_lanes),
                   out_shape=out_shape, out_bits=int(out_bits), out_signed=bool(out_signed),
                   out_lanes=int(out_lanes), max_batch=max_batch, buffer_bytes=1 << (need - 1).bit_length())

    @classmethod
    def of_parts(cls, inputs, outputs, *, in_lanes: int, out_lanes: int) -> "LinkFormat":
        """The layout of streams carrying the tensors ``inputs`` and ``outputs``
        (:class:`LinkPart` s, one or more each) one after the other, elements of their
        :func:`common_type`; one tensor is a stream of its own shape and type."""
        sides = []
        for what, parts in (("inputs", tuple(inputs)), ("outputs", tuple(outputs))):
            if not parts or not all(isinstance(p, LinkPart) for p in parts):
                raise ValueError(f"{what} must be one or more LinkParts, not {parts!r}")
            shape = parts[0].shape if len(parts) == 1 else (sum(p.elems for p in parts),)
            sides.append((shape, *common_type((p.bits, p.signed) for p in parts), parts if len(parts) > 1 else ()))
        (ishape, ibits, isigned, iparts), (oshape, obits, osigned, oparts) = sides
        fmt = cls.create(in_shape=ishape, in_bits=ibits, in_signed=isigned, in_lanes=in_lanes, out_shape=oshape,
                         out_bits=obits, out_signed=osigned, out_lanes=out_lanes)
        return replace(fmt, in_parts=iparts, out_parts=oparts)

    @property
    def inputs(self) -> tuple[LinkPart, ...]:
        """The tensors the input stream carries, in order (one: the stream itself, unnamed)."""
        return self.in_parts or (LinkPart("", self.in_shape, self.in_bits, self.in_signed),)

    @property
    def outputs(self) -> tuple[LinkPart, ...]:
        """The tensors the output stream carries, in order (one: the stream itself, unnamed)."""
        return self.out_parts or (LinkPart("", self.out_shape, self.out_bits, self.out_signed),)

    @property
    def in_elems(self) -> int:
        return int(np.prod(self.in_shape))

    @property
    def out_elems(self) -> int:
        return int(np.prod(self.out_shape))

    @property
    def in_elem_bytes(self) -> int:
        return _elem_bytes(self.in_bits)

    @property
    def out_elem_bytes(self) -> int:
        return _elem_bytes(self.out_bits)

    @property
    def in_bytes(self) -> int:
        """Payload bytes per inference, host -> board."""
        return self.in_elems * self.in_elem_bytes

    @property
    def out_bytes(self) -> int:
        """Payload bytes per inference, board -> host."""
        return self.out_elems * self.out_elem_bytes

    def encode_inputs(self, x: np.ndarray, bipolar: bool = False) -> bytes:
        """(N, *in_shape) integers (NHWC) -> ``N * in_bytes`` payload bytes."""
        x = np.asarray(x)
        if x.shape[1:] != tuple(self.in_shape):
            raise ValueError(f"input shape {x.shape[1:]!r} does not match the accelerator's "
                             f"{tuple(self.in_shape)!r}")
        v = x.astype(np.int64).reshape(len(x), -1)
        if bipolar:
            if not np.isin(v, (-1, 1)).all():
                raise ValueError("bipolar inputs must be -1 or +1")
            v = (v > 0).astype(np.int64)
        lo, hi = ((-(1 << (self.in_bits - 1)), (1 << (self.in_bits - 1)) - 1) if self.in_signed
                  else (0, (1 << self.in_bits) - 1))
        if not bipolar and (v.min(initial=lo) < lo or v.max(initial=hi) > hi):
            bad = v[(v < lo) | (v > hi)][0]
            raise ValueError(f"input value {int(bad)!r} does not fit "
                             f"{'int' if self.in_signed else 'uint'}{self.in_bits}")
        return _little_endian(v, self.in_elem_bytes)

    def encode_outputs(self, y: np.ndarray, bipolar: bool = False) -> bytes:
        """(N, *out_shape) integers -> the ``N * out_bytes`` payload bytes the board sends for
        them (the inverse of :meth:`decode_outputs`; bipolar -1/+1 outputs are coded 0/1)."""
        y = np.asarray(y)
        if y.shape[1:] != tuple(self.out_shape):
            raise ValueError(f"output shape {y.shape[1:]!r} does not match the accelerator's "
                             f"{tuple(self.out_shape)!r}")
        v = y.astype(np.int64).reshape(len(y), -1)
        if bipolar:
            v = (v > 0).astype(np.int64)
        return _little_endian(v, self.out_elem_bytes)

    def decode_outputs(self, payload: bytes, count: int) -> np.ndarray:
        """``count * out_bytes`` payload bytes -> (count, *out_shape) int64 (NHWC)."""
        nb = self.out_elem_bytes
        if len(payload) != count * self.out_bytes:
            raise ValueError(f"result payload has {len(payload)} bytes, expected {count * self.out_bytes}")
        b = np.frombuffer(payload, np.uint8).astype(np.int64).reshape(count * self.out_elems, nb)
        v = np.zeros(len(b), np.int64)
        for k in range(nb):
            v |= b[:, k] << (8 * k)
        v &= (1 << self.out_bits) - 1
        if self.out_signed:
            v = np.where(v >= 1 << (self.out_bits - 1), v - (1 << self.out_bits), v)
        return v.reshape((count,) + tuple(self.out_shape))


    def encode_tensors(self, xs, bipolar=None) -> bytes:
        """One ``(N, *shape)`` integer array per input tensor (:attr:`inputs`, in order) ->
        ``N * in_bytes`` payload bytes: per inference, each tensor's elements (NHWC) one after
        the other. ``bipolar[k]``: tensor ``k`` holds -1/+1, coded 0/1."""
        return _little_endian(join_tensors(xs, self.inputs, bipolar, "input"), self.in_elem_bytes)

    def encode_output_tensors(self, ys, bipolar=None) -> bytes:
        """One ``(N, *shape)`` integer array per output tensor -> the payload bytes the board
        sends for them (the inverse of :meth:`decode_tensors`)."""
        return _little_endian(join_tensors(ys, self.outputs, bipolar, "output", check=False), self.out_elem_bytes)

    def decode_tensors(self, payload: bytes, count: int, bipolar=None) -> list[np.ndarray]:
        """``count * out_bytes`` payload bytes -> one ``(count, *shape)`` int64 array per output
        tensor (:attr:`outputs`, in order); a bipolar tensor's codes 1/0 become +1/-1."""
        return split_tensors(self.decode_outputs(payload, count), self.outputs, bipolar)


def _flags(bipolar, parts) -> tuple[bool, ...]:
    flags = (False,) * len(parts) if bipolar is None else tuple(bool(b) for b in bipolar)
    if len(flags) != len(parts):
        raise ValueError(f"{len(flags)} bipolar flags for {len(parts)} tensors")
    return flags


def join_tensors(arrays, parts, bipolar=None, what: str = "input", check: bool = True) -> np.ndarray:
    """One ``(N, *shape)`` integer array per :class:`LinkPart` of ``parts`` -> the ``(N,
    elements)`` int64 values a stream carries: per inference, each tensor's elements (NHWC) one
    after the other; a ``bipolar`` tensor's -1/+1 as 0/1. Each array's shape is checked against
    its part, and with ``check`` its values against the part's type (``ValueError`` naming
    ``what``)."""
    arrays = list(arrays)
    if len(arrays) != len(parts):
        raise ValueError(f"{len(arrays)} {what} tensors given; the accelerator takes {len(parts)}")
    flat = []
    for x, part, bip in zip(arrays, parts, _flags(bipolar, parts)):
        name = f" {part.name!r}" if len(parts) > 1 else ""
        x = np.asarray(x)
        if x.shape[1:] != part.shape:
            raise ValueError(f"{what}{name} shape {x.shape[1:]!r} does not match the accelerator's {part.shape!r}")
        v = x.astype(np.int64).reshape(len(x), -1)
        if bip:
            if check and not np.isin(v, (-1, 1)).all():
                raise ValueError(f"bipolar {what}s must be -1 or +1")
            v = (v > 0).astype(np.int64)
        elif check:
            lo, hi = part.range
            if v.min(initial=lo) < lo or v.max(initial=hi) > hi:
                bad = v[(v < lo) | (v > hi)][0]
                raise ValueError(f"{what}{name} value {int(bad)!r} does not fit "
                                 f"{'int' if part.signed else 'uint'}{part.bits}")
        flat.append(v)
    if len({len(v) for v in flat}) > 1:
        raise ValueError(f"the {what} tensors hold different numbers of inferences {[len(v) for v in flat]!r}")
    return np.concatenate(flat, axis=1)


def split_tensors(values, parts, bipolar=None) -> list[np.ndarray]:
    """The inverse of :func:`join_tensors`: ``(N, ...)`` stream values (``N * elements`` of
    them) -> one ``(N, *shape)`` int64 array per part; a ``bipolar`` tensor's 1/0 as +1/-1."""
    v = np.asarray(values, dtype=np.int64)
    v = v.reshape(len(v), -1)
    out, at = [], 0
    for part, bip in zip(parts, _flags(bipolar, parts)):
        t = v[:, at:at + part.elems].reshape((len(v),) + part.shape)
        out.append(2 * t - 1 if bip else t)
        at += part.elems
    if at != v.shape[1]:
        raise ValueError(f"{v.shape[1]} stream values per inference, expected {at}")
    return out


def _little_endian(v: np.ndarray, nbytes: int) -> bytes:
    """Integers as ``nbytes`` little-endian two's-complement bytes each."""
    u = v & ((1 << (8 * nbytes)) - 1)
    return np.stack([(u >> (8 * k)) & 0xFF for k in range(nbytes)], axis=-1).astype(np.uint8).tobytes()


def link_format(describe: dict) -> LinkFormat:
    """The link layout for a pipeline description (``Pipeline.describe()``, e.g. read back from
    a build's ``accelerator.json``)."""
    try:
        i, o = describe["input"], describe["output"]
        if "inputs" in describe or "outputs" in describe:
            return LinkFormat.of_parts([LinkPart.from_describe(d) for d in describe["inputs"]],
                                       [LinkPart.from_describe(d) for d in describe["outputs"]],
                                       in_lanes=int(i["lanes"]), out_lanes=int(o["lanes"]))
        return LinkFormat.create(in_shape=i["shape"], in_bits=int(i["bits"]), in_signed=bool(i["signed"]),
                                 in_lanes=int(i["lanes"]), out_shape=o["shape"], out_bits=int(o["bits"]),
                                 out_signed=bool(o["signed"]), out_lanes=int(o["lanes"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"not a pipeline description (missing or bad {e!s})") from None


def encode_frame(ftype: int, session: int, seq: int, count: int, payload: bytes = b"") -> bytes:
    """One frame: magic, header, payload, CRC-32 (little-endian)."""
    for name, v, top in (("type", ftype, 0xFF), ("session", session, 0xFFFF), ("seq", seq, 0xFF),
                         ("count", count, 0xFF)):
        if not (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= top):
            raise ValueError(f"frame {name} must be an int in 0..{top}, not {v!r}")
    body = bytes((ftype,)) + struct.pack("<H", session) + bytes((seq, count)) + bytes(payload)
    return MAGIC + body + struct.pack("<I", crc32(body))


def encode_selftest_command(passes: int, expected_crc: int) -> bytes:
    """The payload of a SELFTEST frame: replay the stored inputs ``passes`` times (1..2**32-1),
    each pass's outputs expected to have CRC-32 ``expected_crc``."""
    for name, v in (("passes", passes), ("expected_crc", expected_crc)):
        if not (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 0xFFFFFFFF):
            raise ValueError(f"self-test {name} must be an int in 0..{0xFFFFFFFF}, not {v!r}")
    if passes == 0:
        raise ValueError("self-test passes must be at least 1")
    return struct.pack("<II", passes, expected_crc)


@dataclass(frozen=True)
class SelfTestCounts:
    """What a board reports after a self-test (the SELFTEST_RESULT payload).

    ``cycles``: clock cycles from the first input transfer into the accelerator to the last
    output transfer out of it (both included); ``latency_cycles``: the same for the first
    inference alone (the pipeline was empty); ``inferences``: outputs counted; ``failed_passes``:
    passes whose outputs' CRC-32 differed from the expected one; ``first_crc``: the CRC-32 of
    the first pass's outputs (link byte coding, as :meth:`LinkFormat.encode_outputs`)."""

    cycles: int
    latency_cycles: int
    inferences: int
    failed_passes: int
    first_crc: int

    @classmethod
    def decode(cls, payload: bytes) -> "SelfTestCounts":
        if len(payload) != SELFTEST_RESULT_BYTES:
            raise ValueError(f"self-test result has {len(payload)} bytes, expected {SELFTEST_RESULT_BYTES}")
        return cls(*struct.unpack("<QIIII", payload))

    def encode(self) -> bytes:
        return struct.pack("<QIIII", self.cycles, self.latency_cycles, self.inferences, self.failed_passes,
                           self.first_crc)


@dataclass(frozen=True)
class Frame:
    """A received frame. ``ok`` is False when its CRC did not match (header and payload
    untrusted)."""

    type: int
    session: int
    seq: int
    count: int
    payload: bytes
    ok: bool = True


class FrameParser:
    """Incremental parser of a byte stream of frames (either direction).

    ``payload_len(type, count)`` gives the payload length of a frame from its header, or
    ``None`` for a header that cannot be a frame (unknown type, implausible count): the parser
    then skips its magic and hunts for the next one. ``feed(data)`` returns every frame
    completed by ``data``, including ones with a bad CRC (``ok=False``, after which the parser
    hunts for a magic from the byte after the bad frame's magic, so a real frame hidden behind
    a false header is still found); bytes outside frames are counted in ``junk``.
    """

    def __init__(self, payload_len):
        self._payload_len = payload_len
        self._buf = bytearray()
        self.junk = 0

    def reset(self) -> None:
        """Forget a frame in progress (e.g. after the link went quiet)."""
        self.junk += len(self._buf)
        self._buf.clear()

    @property
    def pending(self) -> int:
        """Bytes held of a frame not yet complete."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames = []
        buf = self._buf
        while True:
            k = buf.find(MAGIC)
            if k < 0:
                keep = 1 if buf[-1:] == MAGIC[:1] else 0
                self.junk += len(buf) - keep
                del buf[:len(buf) - keep]
                break
            if k:
                self.junk += k
                del buf[:k]
            if len(buf) < HEADER_BYTES:
                break
            ftype, count = buf[2], buf[6]
            (session,) = struct.unpack("<H", bytes(buf[3:5]))
            seq = buf[5]
            n = self._payload_len(ftype, count)
            if n is None:
                self.junk += 2
                del buf[:2]
                continue
            total = HEADER_BYTES + n + CRC_BYTES
            if len(buf) < total:
                break
            body = bytes(buf[2:HEADER_BYTES + n])
            (crc,) = struct.unpack("<I", bytes(buf[HEADER_BYTES + n:total]))
            if crc == crc32(body):
                frames.append(Frame(ftype, session, seq, count, body[HEADER_BYTES - 2:], True))
                del buf[:total]
            else:
                # a corrupted header may have given a wrong length: report it and resync on
                # the next magic after this one
                frames.append(Frame(ftype, session, seq, count, b"", False))
                self.junk += 2
                del buf[:2]
        return frames
