"""Frame deframer/framer and byte <-> lane packing in the Amaranth simulator, checked against
the host-side protocol code (zlib CRC-32, NumPy byte coding)."""
from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from amaranth.hdl import signed, unsigned
from amaranth.sim import Simulator

from onnx2hw import protocol as P
from onnx2hw.rtl.framing import BytesToLanes, Deframer, Framer, LanesToBytes


def _sim(dut, *procs, testbenches=(), until=None):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for p in procs:
        sim.add_process(p)
    for t in testbenches:
        sim.add_testbench(t)
    if until is None:
        sim.run()
    else:
        sim.run_until(1e-8 * until)


def _byte_source(port, items, gap=2, rng=None):
    """items: ints (bytes) or ("idle", cycles)."""
    async def src(ctx):
        for it in items:
            if isinstance(it, tuple):
                await ctx.tick().repeat(it[1])
                continue
            ctx.set(port.payload, it)
            ctx.set(port.valid, 1)
            await ctx.tick().until(port.ready)
            ctx.set(port.valid, 0)
            g = gap if rng is None else int(rng.integers(1, gap + 1))
            if g > 1:
                await ctx.tick().repeat(g - 1)
        await ctx.tick().repeat(200)
    return src


def _collector(port, out, rng=None, as_int=True):
    async def sink(ctx):
        while True:
            ctx.set(port.ready, 1 if rng is None else int(rng.random() < 0.6))
            await ctx.tick()
    async def mon(ctx):
        async for _clk, _rst, valid, ready, payload in ctx.tick().sample(port.valid, port.ready, port.payload):
            if valid and ready:
                out.append(payload if as_int else payload)
    return sink, mon


def test_crc_and_frame_encoding_match_zlib():
    f = P.encode_frame(P.T_DATA, 0xBEEF, 7, 2, b"\x01\x02\x03\x04")
    assert f[:2] == P.MAGIC and f[2:7] == bytes((1, 0xEF, 0xBE, 7, 2)) and len(f) == P.HEADER_BYTES + 4 + 4
    assert struct.unpack("<I", f[-4:])[0] == zlib.crc32(f[2:-4])
    (frame,) = P.FrameParser(lambda t, c: 2 * c).feed(f)
    assert (frame.type, frame.session, frame.seq, frame.count, frame.payload, frame.ok) == \
        (P.T_DATA, 0xBEEF, 7, 2, b"\x01\x02\x03\x04", True)


def test_deframer_commits_good_frames_and_drops_bad_ones():
    rng = np.random.default_rng(1)
    in_bytes, timeout = 3, 60
    ses = 0x1234
    good = [(k, int(c), rng.integers(0, 256, c * in_bytes).astype(np.uint8).tobytes())
            for k, c in enumerate([1, 2, 1, 3, 1, 1, 2])]
    frames = [P.encode_frame(P.T_DATA, ses + s, s, c, p) for s, c, p in good]
    corrupt = bytearray(P.encode_frame(P.T_DATA, ses, 40, 1, b"\x10\x20\x30"))
    corrupt[8] ^= 0x04                                         # payload bit flip -> E_CRC
    bad_type = P.encode_frame(0x33, ses, 41, 1, b"\x00\x00\x00")
    zero = P.encode_frame(P.T_DATA, ses, 42, 0, b"")
    truncated = P.encode_frame(P.T_DATA, ses, 43, 1, b"\x01\x02\x03")[:-3]
    too_many = P.encode_frame(P.T_DATA, ses, 44, 5, bytes(15))  # more than max_count inferences
    stream = (list(b"\x00\xA5") + list(frames[0]) + list(bytes(corrupt)) + list(frames[1])
              + list(bad_type) + list(frames[2]) + list(zero) + list(frames[3])
              + list(truncated) + [("idle", 3 * timeout)] + list(frames[4]) + list(b"\xA5\xA5")
              + list(frames[5]) + list(too_many[:P.HEADER_BYTES])
              # noise that looks like a header start right before a frame: the type check fails
              # on the frame's first magic byte, where the deframer restarts its hunt
              + list(P.MAGIC) + list(frames[6]))
    dut = Deframer(in_bytes=in_bytes, buffer_bytes=64, timeout=timeout, max_count=4)
    payload, tags, errs = [], [], []
    s1, m1 = _collector(dut.o, payload, np.random.default_rng(2))
    s2, m2 = _collector(dut.tag, tags)
    s3, m3 = _collector(dut.err, errs)
    _sim(dut, s1, m1, s2, m2, s3, m3, _byte_source(dut.i, stream, gap=3, rng=rng),
         until=len(stream) * 4 + 3 * timeout + 400)
    assert bytes(payload) == b"".join(p for _s, _c, p in good)
    assert [(t["session"], t["seq"], t["count"]) for t in tags] == [(ses + s, s, c) for s, c, _p in good]
    # the bad-type frame's header bytes after its type are not magic, so it costs one report
    got = [(e["code"], e["session"], e["seq"]) for e in errs]
    assert got == [(P.E_CRC, ses, 40), (P.E_TYPE, P.NO_SESSION, P.NO_SEQ), (P.E_COUNT, ses, 42),
                   (P.E_TIMEOUT, ses, 43), (P.E_COUNT, ses, 44), (P.E_TYPE, P.NO_SESSION, P.NO_SEQ)]


def test_deframer_buffer_of_several_block_rows_wraps_in_order():
    """An 8 KiB buffer is two block-RAM rows of 4096 bytes (each read into its own register,
    then multiplexed): 9,000 payload bytes cross both row boundaries and wrap, under random
    output stalls."""
    in_bytes = 1500
    rng = np.random.default_rng(5)
    payloads = [rng.integers(0, 256, in_bytes).astype(np.uint8).tobytes() for _ in range(6)]
    stream = [b for s, p in enumerate(payloads) for b in P.encode_frame(P.T_DATA, 9, s, 1, p)]
    dut = Deframer(in_bytes=in_bytes, buffer_bytes=8192, timeout=100)
    payload, tags = [], []
    s1, m1 = _collector(dut.o, payload, np.random.default_rng(6))
    s2, m2 = _collector(dut.tag, tags)
    _sim(dut, s1, m1, s2, m2, _byte_source(dut.i, stream, gap=1), until=2 * len(stream) + 400)
    assert [t["seq"] for t in tags] == list(range(6))
    assert bytes(payload) == b"".join(payloads)


def test_deframer_overflow_rolls_back_and_later_frames_pass():
    in_bytes = 4
    frames = [P.encode_frame(P.T_DATA, 1, s, 2, bytes(range(8 * s, 8 * s + 8))) for s in range(4)]
    stream = [b for f in frames for b in f]
    dut = Deframer(in_bytes=in_bytes, buffer_bytes=16, timeout=200)
    payload, tags, errs = [], [], []

    async def sink(ctx):                  # the consumer is stalled until everything was sent
        ctx.set(dut.o.ready, 0)
        await ctx.tick().repeat(len(stream) * 2 + 20)
        ctx.set(dut.o.ready, 1)

    _s1, m1 = _collector(dut.o, payload)
    s2, m2 = _collector(dut.tag, tags)
    s3, m3 = _collector(dut.err, errs)
    _sim(dut, sink, m1, s2, m2, s3, m3, _byte_source(dut.i, stream, gap=2), until=len(stream) * 2 + 300)
    # 15 bytes in the 16-byte buffer plus one in the output register: frames 0 and 1 fit,
    # 2 and 3 overflow and are dropped whole
    assert [t["seq"] for t in tags] == [0, 1]
    assert [(e["code"], e["session"], e["seq"]) for e in errs] == [(P.E_OVERFLOW, 1, 2), (P.E_OVERFLOW, 1, 3)]
    assert bytes(payload) == bytes(range(16))


@pytest.mark.parametrize("out_bytes,counts", [(1, [1, 3, 2]), (5, [2, 1, 1, 2])])
def test_framer_frames_decode_with_host_parser(out_bytes, counts):
    """Tags of the live session become RESULT frames (session echoed); the last tag belongs to
    an earlier session than ``live`` at the time: its payload is taken and dropped, unsent."""
    rng = np.random.default_rng(out_bytes)
    payloads = [rng.integers(0, 256, c * out_bytes).astype(np.uint8).tobytes() for c in counts]
    dut = Framer(out_bytes=out_bytes)
    out = []
    live, old = 0xA55A, 0x0102
    sessions = [live] * (len(counts) - 2) + [old, live]

    async def tags(ctx):
        ctx.set(dut.live, live)
        for s, (c, ses) in enumerate(zip(counts, sessions)):
            ctx.set(dut.tag.payload, {"session": ses, "seq": 10 + s, "count": c})
            ctx.set(dut.tag.valid, 1)
            await ctx.tick().until(dut.tag.ready)
            ctx.set(dut.tag.valid, 0)
            if s == 0:
                ctx.set(dut.err.payload, {"code": P.E_CRC, "seq": 99, "session": 0x7777})
                ctx.set(dut.err.valid, 1)
                await ctx.tick().until(dut.err.ready)
                ctx.set(dut.err.valid, 0)

    sink, mon = _collector(dut.o, out, np.random.default_rng(5))
    _sim(dut, sink, mon, tags, _byte_source(dut.i, list(b"".join(payloads)), gap=3, rng=rng),
         until=6000)
    parser = P.FrameParser(lambda t, c: c * out_bytes if t == P.T_RESULT else 0 if t == P.T_ERROR else None)
    frames = parser.feed(bytes(out))
    assert parser.junk == 0 and parser.pending == 0
    assert all(f.ok for f in frames)
    results = [f for f in frames if f.type == P.T_RESULT]
    assert [(f.session, f.seq, f.count, f.payload) for f in results] == [
        (live, 10 + s, c, p) for s, (c, p, ses) in enumerate(zip(counts, payloads, sessions)) if ses == live]
    errors = [f for f in frames if f.type == P.T_ERROR]
    assert [(f.session, f.seq, f.count, f.payload) for f in errors] == [(0x7777, 99, P.E_CRC, b"")]


@pytest.mark.parametrize("bits,is_signed,lanes", [(1, False, 4), (4, True, 3), (8, False, 2),
                                                  (9, True, 1), (16, True, 2), (12, False, 3)])
def test_lane_packing_round_trip_matches_protocol(bits, is_signed, lanes):
    shape = (signed if is_signed else unsigned)(bits)
    fmt = P.LinkFormat(in_shape=(2, lanes), in_bits=bits, in_signed=is_signed, in_lanes=lanes,
                       out_shape=(2, lanes), out_bits=bits, out_signed=is_signed, out_lanes=lanes,
                       max_batch=1, buffer_bytes=16)
    rng = np.random.default_rng(bits)
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1))) if is_signed else (0, 1 << bits)
    x = rng.integers(lo, hi, (3, 2, lanes))
    x.flat[0], x.flat[1] = lo, hi - 1
    host_bytes = fmt.encode_inputs(x)

    # bytes -> lanes: the hardware elements equal x
    b2l = BytesToLanes(elem_shape=shape, lanes=lanes)
    lanes_out = []
    sink, mon = _collector(b2l.o, lanes_out, np.random.default_rng(3))
    _sim(b2l, sink, mon, _byte_source(b2l.i, list(host_bytes), gap=2, rng=rng), until=len(host_bytes) * 6 + 400)
    assert np.array_equal(np.array([[int(v) for v in t] for t in lanes_out]).reshape(x.shape), x)

    # lanes -> bytes: the hardware bytes decode (host side) to x
    l2b = LanesToBytes(elem_shape=shape, lanes=lanes)
    got = []

    gaps = np.random.default_rng(5)

    async def src(ctx):   # random idle cycles between transfers; the sink's ready is random too
        for t in x.reshape(-1, lanes):
            ctx.set(l2b.i.payload, [int(v) for v in t])
            ctx.set(l2b.i.valid, 1)
            await ctx.tick().until(l2b.i.ready)
            ctx.set(l2b.i.valid, 0)
            idle = int(gaps.integers(0, 3))
            if idle:
                await ctx.tick().repeat(idle)
        await ctx.tick().repeat(100)

    sink, mon = _collector(l2b.o, got, np.random.default_rng(4))
    _sim(l2b, sink, mon, testbenches=[src], until=len(host_bytes) * 6 + 400)
    assert bytes(got) == host_bytes
    assert np.array_equal(fmt.decode_outputs(bytes(got), 3), x)


def test_host_parser_resyncs_after_corruption():
    plen = lambda t, c: 2 * c if t == P.T_RESULT else (0 if t == P.T_ERROR else None)  # noqa: E731
    good1 = P.encode_frame(P.T_RESULT, 5, 1, 1, b"\x01\x02")
    bad = bytearray(P.encode_frame(P.T_RESULT, 5, 2, 1, b"\x03\x04"))
    bad[7] ^= 1
    good2 = P.encode_frame(P.T_ERROR, 5, 3, P.E_CRC)
    # a false header (magic, RESULT, a long count) in noise right before a good frame: its CRC
    # fails once enough bytes arrived, and the hunt resumes inside it, finding the good frame
    false = P.MAGIC + bytes((P.T_RESULT, 0, 0, 0, 4))
    good3 = P.encode_frame(P.T_RESULT, 5, 4, 1, b"\x05\x06")
    parser = P.FrameParser(plen)
    stream = b"\x00\x11" + good1 + bytes(bad) + good2 + false + good3 + b"\x00" * 8
    frames = []
    for k in range(0, len(stream), 3):                     # arbitrary chunking
        frames += parser.feed(stream[k:k + 3])
    assert [(f.type, f.seq, f.ok) for f in frames] == [(P.T_RESULT, 1, True), (P.T_RESULT, 2, False),
                                                       (P.T_ERROR, 3, True), (P.T_RESULT, 0, False),
                                                       (P.T_RESULT, 4, True)]
    assert frames[-1].payload == b"\x05\x06" and frames[-1].session == 5


@pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")
def test_bad_parameters():
    with pytest.raises(ValueError, match="power of two"):
        Deframer(in_bytes=4, buffer_bytes=48, timeout=10)
    with pytest.raises(ValueError, match="in_bytes"):
        Deframer(in_bytes=0, buffer_bytes=64, timeout=10)
    with pytest.raises(ValueError, match="lanes"):
        BytesToLanes(elem_shape=8, lanes=0)
    with pytest.raises(ValueError, match="max_count"):
        Deframer(in_bytes=4, buffer_bytes=64, timeout=10, max_count=0)
    with pytest.raises(ValueError, match="seq must be an int in 0..255"):
        P.encode_frame(P.T_DATA, 1, 256, 1, b"")
    with pytest.raises(ValueError, match="session must be an int in 0..65535"):
        P.encode_frame(P.T_DATA, 1 << 16, 0, 1, b"")
