"""Run inferences on a built accelerator over its host link."""
from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .. import protocol as P
from ..build import BuildResult
from ..build_info import host_converters, host_tail, quant_records, read_build_info, selftest_data
from ..design import Design
from ..dataflow import compile_pipeline
from ..flow import integer_graph_of, link_format_of, load_graph
from ..golden.host import run_tail
from ..ir.errors import ModelError
from ..rtl.accelerator import AcceleratorCore
from ..rtl.board_top import BoardTop
from ..rtl.selftest import CYCLE_BITS
from .serial_transport import SerialTransport
from .native_transport import board_transport
from .sim_transport import SimulatedLink
from .transport import LinkError, Transport

__all__ = ["Accelerator", "RunStats", "SelfTestReport", "new_session"]

_last_session = P.NO_SESSION


def new_session() -> int:
    """A random session number (1..65535) that differs from the one this process chose last.

    Random, so that a new process is unlikely (1 in 65535) to pick the session of an earlier,
    interrupted one; a stale reply must in addition carry a sequence number and count the new
    run is waiting for (whose start is random too) to be mistaken for one of its own.
    """
    global _last_session
    while True:
        s = secrets.randbelow(0xFFFF) + 1
        if s != _last_session:
            _last_session = s
            return s


@dataclass
class RunStats:
    """Link statistics of the last :meth:`Accelerator.run` (times in transport seconds)."""

    inferences: int = 0
    frames: int = 0
    resent: int = 0
    crc_errors: int = 0                      # frames from the board with a bad CRC
    board_errors: Counter = field(default_factory=Counter)   # error code -> reports
    stale: int = 0                           # good frames of another session (dropped)
    duplicates: int = 0                      # results of frames already answered (dropped)
    noise_bytes: int = 0                     # received bytes outside any frame
    seconds: float = 0.0
    bytes_out: int = 0                       # host -> board
    bytes_in: int = 0                        # board -> host

    @property
    def inferences_per_s(self) -> float:
        return self.inferences / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class SelfTestReport:
    """What :meth:`Accelerator.selftest` found: the board's counts (``counts``) for ``passes``
    replays of its ``samples`` stored inputs at ``clock_hz``, checked against the golden
    executor's outputs for those inputs (``expected_crc``: the CRC-32 of one pass of them)."""

    samples: int
    passes: int
    clock_hz: float
    expected_crc: int
    counts: P.SelfTestCounts
    source: str = ""

    @property
    def inferences(self) -> int:
        """Inferences the run should have (``samples * passes``)."""
        return self.samples * self.passes

    @property
    def problems(self) -> list[str]:
        """Why the self-test failed (empty when it passed)."""
        c, out = self.counts, []
        if c.inferences != self.inferences:
            out.append(f"the board counted {c.inferences} inferences, not {self.inferences}")
        if c.failed_passes:
            out.append(f"{c.failed_passes} of {self.passes} passes gave outputs that differ from the golden "
                       f"executor's (CRC-32 of the first pass {c.first_crc:#010x}, expected {self.expected_crc:#010x})")
        elif c.first_crc != self.expected_crc:
            out.append(f"the first pass's CRC-32 {c.first_crc:#010x} is not the expected {self.expected_crc:#010x}")
        if c.cycles <= 0:
            out.append("the board counted no cycles")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def cycles_per_inference(self) -> float:
        return self.counts.cycles / max(1, self.counts.inferences)

    @property
    def inferences_per_s(self) -> float:
        """Compute throughput measured on the board: inferences over their cycles at the clock."""
        return self.counts.inferences * self.clock_hz / self.counts.cycles if self.counts.cycles else 0.0

    @property
    def latency_us(self) -> float:
        """Latency of one inference through the empty pipeline, first input to last output."""
        return self.counts.latency_cycles / self.clock_hz * 1e6


class _Pending:
    __slots__ = ("index", "count", "frame", "attempts", "order", "why", "sent")

    def __init__(self, index, count, frame):
        self.index, self.count, self.frame = index, count, frame
        self.attempts, self.order, self.why, self.sent = 0, 0, [], 0.0


class Accelerator:
    """A built accelerator reached through a :class:`~onnx2hw.driver.transport.Transport`.

    Use :meth:`open`. ``run(x)`` takes float inputs shaped like the ONNX model's input (batch
    first) and returns float outputs shaped like its output; ``run(x, raw=True)`` takes and
    returns the integer tensors the hardware computes (NHWC, batch first). A model with several
    inputs takes a dict by input name (raw: by the hardware's tensor name, as
    :attr:`input_shapes` lists them); several outputs come back as a dict by name. They travel
    one after the other in each inference's frame payload (:mod:`onnx2hw.protocol`).

    Frames carry up to ``batch`` inferences (default: the board's maximum, but at most a
    quarter of the run so that frames overlap on the link); ``window`` frames are in flight at
    once. A frame whose result is not back in time, arrives corrupted, is
    reported bad by the board or is overtaken by a later frame's result is sent again, at most
    ``retries`` times, after which :class:`LinkError` is raised. Results are only ever taken
    from frames whose CRC, session, sequence number and length check out.

    Each Accelerator picks a random ``session`` number (:func:`new_session`) carried in every
    frame; the board echoes it, so replies left on the link by an earlier, interrupted run (of
    this or another process) are recognised and dropped. A run that ended in an exception
    (interrupted, or a :class:`LinkError`) makes the next run start a new session.

    ``deadline`` bounds the time of one :meth:`run` (seconds of the transport's clock):
    ``None`` derives it from the baud rate and the run's bytes (:meth:`default_deadline`). When
    it passes, :class:`LinkError` names the port and the results still expected; a port that
    only ever delivers noise ends there, never in a hang.
    """

    def __init__(self, info: dict, transport: Transport, *, batch=None, window=2, retries=8, deadline=None):
        self.info = info
        self.transport = transport
        self.fmt = P.link_format(info["pipeline"])
        q = info["quant"]
        self._qins, self._qouts = quant_records(q, "input"), quant_records(q, "output")
        self._quantizers, self._dequantizers = host_converters(q)
        self._tail = host_tail(q)
        if not (batch is None or isinstance(batch, int) and 1 <= batch <= self.fmt.max_batch):
            raise ValueError(f"batch must be 1..{self.fmt.max_batch} inferences per frame, not {batch!r}")
        if not (isinstance(window, int) and 1 <= window <= 2):
            raise ValueError(f"window must be 1 or 2 frames (the board buffers two), not {window!r}")
        if not (isinstance(retries, int) and retries >= 0):
            raise ValueError(f"retries must be a non-negative int, not {retries!r}")
        if not (deadline is None or isinstance(deadline, (int, float)) and not isinstance(deadline, bool)
                and 0 < deadline < float("inf")):
            raise ValueError(f"deadline must be a positive number of seconds or None, not {deadline!r}")
        self.batch, self.window, self.retries, self.deadline = batch, window, retries, deadline
        self._batch = batch or self.fmt.max_batch
        self.session = new_session()
        self._seq = secrets.randbelow(P.NO_SEQ)
        self._interrupted = False
        self.stats = RunStats()

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, build, port: str = "/dev/ttyUSB0", baud=None, *, pipeline=None, batch=None,
             window=2, retries=8, deadline=None, **sim_options) -> "Accelerator":
        """Open a built accelerator.

        ``build`` is a build directory (its ``accelerator.json``), the dictionary
        :func:`~onnx2hw.driver.read_build_info` returns, a :class:`onnx2hw.BuildResult` or an
        :class:`onnx2hw.Design` (a result of this process: its design is used as it is, nothing
        is read back).

        ``port="sim"`` simulates the board top (UART included) compiled with Verilator
        (:class:`~onnx2hw.driver.native_transport.NativeTransport`; Amaranth's simulator where
        Verilator or a C++ compiler is missing, or for a waveform); the
        design is ``pipeline`` if given, else the :class:`~onnx2hw.Design`'s, else rebuilt from
        the model recorded in the build description. ``baud`` overrides the build's baud rate
        (for simulation: a fast UART keeps runs short; it must divide the clock within 2.5 %).
        ``sim_options`` go to :func:`~onnx2hw.driver.native_transport.board_transport` (fault
        injection). ``batch``, ``window``, ``retries`` and ``deadline``: see the class.
        """
        if port != "sim" and (sim_options or pipeline is not None):
            raise ValueError("pipeline and fault injection options are for port='sim' only")
        if isinstance(build, BuildResult):
            build = build.design if build.design is not None else build.out_dir
        if isinstance(build, Design):
            info = build.host_info()
            pipeline = build.pipeline if pipeline is None else pipeline
        else:
            info = build if isinstance(build, dict) else read_build_info(build)
        if baud is not None and not (isinstance(baud, (int, float)) and not isinstance(baud, bool)
                                     and 0 < baud < float("inf")):
            raise ValueError(f"baud must be a positive number, not {baud!r}")
        baud = float(info["baud"] if baud is None else baud)
        if port == "sim":
            transport = sim_transport(info, baud, pipeline=pipeline, **sim_options)
        else:
            transport = SerialTransport(port, baud)
        try:
            return cls(info, transport, batch=batch, window=window, retries=retries, deadline=deadline)
        except BaseException:
            transport.close()
            raise

    def close(self) -> None:
        self.transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def link_bound(self) -> float:
        """Inferences/s the link allows at best: ``(baud / 10) / max(in_bytes, out_bytes)``
        (payload bytes only; framing adds ``HEADER_BYTES + CRC_BYTES`` bytes per frame)."""
        return self.transport.baud / 10 / max(self.fmt.in_bytes, self.fmt.out_bytes)

    # ------------------------------------------------------------------ quantization
    @property
    def input_shape(self) -> tuple:
        """Integer (NHWC) input shape of one inference (of a one-input model; with several
        inputs, ``(elements,)`` of all of them one after the other: see :attr:`input_shapes`)."""
        return tuple(self.fmt.in_shape)

    @property
    def input_shapes(self) -> dict[str, tuple]:
        """The hardware's integer (NHWC) input tensors of one inference by tensor name, in link order."""
        return {q["tensor"]: tuple(q["shape"]) for q in self._qins}

    @property
    def model_input_shape(self) -> tuple:
        """The ONNX model's input shape of one inference (NCHW when the model's input is an
        image; the first input's for a model with several, see :attr:`model_input_shapes`)."""
        return _model_shape(self._qins[0])

    @property
    def model_input_shapes(self) -> dict[str, tuple]:
        """The ONNX model's input shapes of one inference by input name."""
        return {q["name"]: _model_shape(q) for q in self._qins}

    def quantize(self, x):
        """Float model inputs (batch first, ONNX layout) -> integer NHWC tensors.

        ``x`` is one array for a one-input model, else a dict by input name (the result: a dict
        by the hardware's tensor name). Each must be a real floating array (float64/float16 are
        converted to float32, as the model computes) of shape ``(N, *model_input_shape)`` with
        finite values; anything else raises ``ValueError`` saying what was expected and what
        was given."""
        arrays = self._by_input(x, [q["name"] for q in self._qins], "input name")
        out = [_quantize_one(q, quantizer, a, len(self._qins) > 1)
               for q, quantizer, a in zip(self._qins, self._quantizers, arrays)]
        if len({len(a) for a in out}) > 1:
            raise ValueError(f"the inputs hold different numbers of inferences {[len(a) for a in out]!r}")
        return self._as_inputs(out)

    def _by_input(self, x, names: list[str], what: str) -> list:
        """``x`` as a list in link order: one array (a one-input model), or a dict by ``names``."""
        if isinstance(x, Mapping):
            if sorted(x) != sorted(names):
                raise ValueError(f"inputs are keyed {sorted(x)!r}; the model takes {names!r} (by {what})")
            return [x[n] for n in names]
        if len(names) != 1:
            raise ValueError(f"the model has inputs {', '.join(map(repr, names))}: pass a dict by {what}")
        return [x]

    def _as_inputs(self, arrays: list):
        """Integer inputs in link order -> one array, or a dict by the hardware's tensor name."""
        return arrays[0] if len(arrays) == 1 else {q["tensor"]: a for q, a in zip(self._qins, arrays)}

    def _as_outputs(self, arrays: list):
        """Integer outputs in link order -> one array, or a dict by the hardware's tensor name."""
        return arrays[0] if len(arrays) == 1 else {q["tensor"]: a for q, a in zip(self._qouts, arrays)}

    @property
    def output_names(self) -> tuple[str, ...]:
        """The model's outputs :meth:`outputs` returns: those the host tail computes (if the
        model has one), and the hardware's outputs the tail does not read."""
        names = [d.name for d in self._dequantizers]
        if self._tail is None:
            return tuple(names)
        return tuple(self._tail.output_names) + tuple(n for n in names if n not in self._tail.input_names)

    def dequantize(self, y) -> dict[str, np.ndarray]:
        """Integer NHWC outputs (one array, or a dict by the hardware's tensor name for several)
        -> the model's outputs by name (ONNX layout): dequantized, then through the host tail
        (the golden executor's float ops, as the model defines them)."""
        ys = self._by_input(y, [q["tensor"] for q in self._qouts], "output tensor name")
        return run_tail(self._tail, {d.name: d.dequantize(v) for d, v in zip(self._dequantizers, ys)})

    # ------------------------------------------------------------------ running
    def outputs(self, x) -> dict[str, np.ndarray]:
        """Run a batch of float inputs; the model's outputs by name."""
        return self.dequantize(self._run_int(self.quantize(x)))

    def run(self, x, *, raw: bool = False):
        """Run a batch of inferences; see the class docstring for ``raw``. Returns one array,
        or a dict by output name for a model with several outputs (see :meth:`outputs`)."""
        if raw:
            shapes = self.input_shapes
            xs = [np.asarray(a) for a in self._by_input(x, list(shapes), "tensor name")]
            for (name, shape), xi in zip(shapes.items(), xs):
                label = f"raw input {name!r}" if len(xs) > 1 else "raw input"
                if not np.issubdtype(xi.dtype, np.integer):
                    raise ValueError(f"{label}s must be integers, not {xi.dtype}")
                if xi.shape[1:] != shape:
                    raise ValueError(f"{label} shape {xi.shape!r} is not (N, *{shape!r})")
            return self._run_int(self._as_inputs(xs))
        out = self.outputs(x)
        return next(iter(out.values())) if len(out) == 1 else out

    def _timeout(self) -> float:
        """Seconds to wait for the result of a frame before sending it again."""
        t = self.transport
        fmt = self.fmt
        frame_bytes = (2 * (P.HEADER_BYTES + P.CRC_BYTES) + self._batch * (fmt.in_bytes + fmt.out_bytes))
        link = self.window * frame_bytes * 10.0 / t.baud
        p = self.info["pipeline"]
        compute = (p.get("latency_cycles", 0) + p.get("ii_cycles", 0) * self._batch * self.window) / self.info["clock_hz"]
        return 2.0 * (link + compute) + 64 * 10.0 / t.baud + t.margin_s

    def default_deadline(self, n: int) -> float:
        """The time allowed for a run of ``n`` inferences when ``deadline`` is None: three times
        its bytes on the link (both directions, framing included) and its compute time, plus
        ``min(retries, 8) + 4`` frame time-outs (each includes the transport's latency margin)."""
        fmt, t = self.fmt, self.transport
        batch = self.batch or max(1, min(fmt.max_batch, -(-n // 4)))
        frames = -(-n // batch)
        wire = n * (fmt.in_bytes + fmt.out_bytes) + 2 * frames * (P.HEADER_BYTES + P.CRC_BYTES)
        p = self.info["pipeline"]
        compute = (p.get("latency_cycles", 0) + p.get("ii_cycles", 0) * n) / self.info["clock_hz"]
        saved, self._batch = self._batch, batch
        try:
            per_frame = self._timeout()
        finally:
            self._batch = saved
        return 3.0 * (wire * 10.0 / t.baud + compute) + (min(self.retries, 8) + 4) * per_frame

    def _payload_len(self, ftype: int, count: int):
        if ftype == P.T_RESULT:
            return count * self.fmt.out_bytes if 1 <= count <= self.fmt.max_batch else None
        if ftype == P.T_ERROR:
            return 0
        if ftype == P.T_SELFTEST_RESULT:
            return P.SELFTEST_RESULT_BYTES if count == 1 else None
        return None

    # ------------------------------------------------------------------ self-test
    @property
    def selftest_samples(self) -> int:
        """Inputs held in the board's self-test memory (0 for a build without a self-test)."""
        data = selftest_data(self.info)
        return 0 if data is None else data.samples

    def selftest_seconds(self, passes: int) -> float:
        """Estimated compute time of a self-test of ``passes`` passes (from the pipeline's II and
        latency at the build's clock)."""
        p = self.info["pipeline"]
        n = self.selftest_samples * passes
        return (p.get("latency_cycles", 0) + p.get("ii_cycles", 0) * n) / self.info["clock_hz"]

    def selftest(self, passes: int = 64) -> SelfTestReport:
        """Run the board's self-test (a build of ``onnx2hw synth --selftest``): its stored inputs
        replayed ``passes`` times back to back through the accelerator at full speed, the
        outputs checked on the board against the CRC-32 of the golden executor's outputs for
        those inputs (recorded in the build description), and the cycles counted on the board.

        The command is sent again after a board error report or a time-out (at most
        ``retries`` times); :class:`LinkError` when no result comes back. ``ValueError`` for a
        build without a self-test or a bad ``passes``."""
        data = self._selftest_data(passes)
        t = self.transport
        expected = data.output_crc32
        frame_s = 2 * (P.HEADER_BYTES + P.CRC_BYTES + P.SELFTEST_RESULT_BYTES) * 10.0 / t.baud
        timeout = 4.0 * self.selftest_seconds(passes) + 2 * frame_s + 64 * 10.0 / t.baud + t.margin_s
        deadline = self.deadline if self.deadline is not None else (min(self.retries, 8) + 2) * timeout
        counts = _SelfTestRun(self, passes, expected, timeout, deadline).run()
        return SelfTestReport(data.samples, passes, float(self.info["clock_hz"]), expected, counts, data.source)

    def _selftest_data(self, passes):
        """The build's self-test record, after checking that ``passes`` of it fit the board's
        counters (``ValueError`` otherwise, or for a build without a self-test)."""
        data = selftest_data(self.info)
        if data is None:
            raise ValueError("this build has no self-test: build it with `onnx2hw synth --selftest`")
        if isinstance(passes, bool) or not isinstance(passes, int) or not 1 <= passes <= 0xFFFFFFFF:
            raise ValueError(f"passes must be an int in 1..{0xFFFFFFFF}, not {passes!r}")
        n = data.samples * passes
        p = self.info["pipeline"]
        if n > 0xFFFFFFFF:
            raise ValueError(f"{passes} passes of {data.samples} inputs exceed the board's 32-bit inference count")
        if p.get("latency_cycles", 0) + p.get("ii_cycles", 1) * n >= 1 << CYCLE_BITS:
            raise ValueError(f"{passes} passes would overflow the board's {CYCLE_BITS}-bit cycle counter")
        return data

    # ------------------------------------------------------------------ one run on the link
    def _run_session(self) -> int:
        """The session of a new run: a new one when the last run ended in an exception (its
        frames may still be on the link)."""
        if self._interrupted:
            self.session = new_session()
        return self.session

    def _next_seq(self) -> int:
        """The sequence number of the next frame sent (``NO_SEQ`` is reserved: "not read")."""
        seq = self._seq
        self._seq = (self._seq + 1) % P.NO_SEQ
        return seq

    def _claim_link(self) -> float:
        """Start a run: it counts as interrupted until :meth:`_release_link`; bytes already
        waiting on the link are dropped. Returns the start time."""
        self._interrupted = True
        self.transport.flush_input()
        return self.transport.now()

    def _release_link(self, stats: RunStats, parser: P.FrameParser, t0: float) -> None:
        """End a run that completed: record its time and noise in ``stats``."""
        stats.seconds = self.transport.now() - t0
        stats.noise_bytes = parser.junk
        self._interrupted = False

    def _run_int(self, xi):
        """Integer NHWC inputs -> integer outputs, over the link (one array each, or dicts by
        the hardware's tensor name: see the class docstring)."""
        xs = [np.asarray(a) for a in self._by_input(xi, [q["tensor"] for q in self._qins], "tensor name")]
        if len(xs[0]) == 0:
            return self._as_outputs([np.zeros((0,) + p.shape, np.int64) for p in self.fmt.outputs])
        return self._as_outputs(_DataRun(self, xs).run())


class _SelfTestRun:
    """One self-test command on the link of ``acc``: sent again after a board error report or
    a time-out until its result comes back."""

    def __init__(self, acc: Accelerator, passes: int, expected: int, timeout: float, deadline: float):
        self.acc, self.t = acc, acc.transport
        self.timeout, self.deadline = timeout, deadline
        self.session = acc._run_session()
        self.seq = acc._next_seq()
        self.frame = P.encode_frame(P.T_SELFTEST, self.session, self.seq, 1,
                                    P.encode_selftest_command(passes, expected))
        self.parser = P.FrameParser(acc._payload_len)
        self.stats = acc.stats = RunStats()
        self.why: list[str] = []          # why the command was sent again
        self.counts = None

    def run(self) -> P.SelfTestCounts:
        """Send the command until the board's counts come back; :class:`LinkError` after
        ``retries`` resends or at the deadline."""
        acc, t, stats = self.acc, self.t, self.stats
        t0 = acc._claim_link()
        self.end = t0 + self.deadline
        attempts = 0
        while self.counts is None:
            if attempts > acc.retries:
                raise LinkError(f"{t.name}: the self-test failed after {acc.retries} retries "
                                f"({', '.join(self.why[-3:])}); check the port, baud rate and that the "
                                f"board runs this self-test build")
            attempts += 1
            stats.resent += attempts > 1
            t.write(self.frame)
            stats.frames += 1
            stats.bytes_out += len(self.frame)
            self._await_result(t.now())
        stats.inferences = self.counts.inferences
        acc._release_link(stats, self.parser, t0)
        return self.counts

    def _await_result(self, sent: float) -> None:
        """Read until the result arrives (sets :attr:`counts`), the board reports an error or
        the command times out (both: return to send it again)."""
        t, stats = self.t, self.stats
        while self.counts is None:
            now = t.now()
            if now >= self.end:
                raise LinkError(f"{t.name}: no self-test result within the {self.deadline:.3g} s deadline "
                                f"(received {stats.bytes_in} bytes, {stats.crc_errors} frames with a bad CRC, "
                                f"{self.parser.junk} bytes of noise); check the port, baud rate and that the "
                                f"board runs this self-test build")
            if now >= sent + self.timeout:
                self.why.append("no answer")
                return
            chunk = t.read(4096, min(sent + self.timeout, self.end) - now)
            stats.bytes_in += len(chunk)
            resend = False
            for f in self.parser.feed(chunk):
                resend = self._take(f) or resend
            if resend and self.counts is None:
                return

    def _take(self, f) -> bool:
        """Account for one frame from the board; whether it asks for the command again (an
        error report on it)."""
        stats = self.stats
        if not f.ok:
            stats.crc_errors += 1
        elif f.session != self.session:
            stats.stale += f.session != P.NO_SESSION
        elif f.type == P.T_ERROR:
            stats.board_errors[f.count] += 1
            if f.seq == self.seq:
                self.why.append(f"board: {P.ERROR_CODES.get(f.count, f'error {f.count}')}")
                return True
        elif f.type == P.T_SELFTEST_RESULT and f.seq == self.seq and self.counts is None:
            self.counts = P.SelfTestCounts.decode(f.payload)
        else:
            stats.duplicates += 1
        return False


class _DataRun:
    """One :meth:`Accelerator._run_int` on the link of ``acc``: the inputs in frames of up to
    ``batch`` inferences, at most ``window`` in flight, each sent again when it times out, is
    reported bad by the board or is overtaken by a later frame's result."""

    def __init__(self, acc: Accelerator, xs: list[np.ndarray]):
        fmt = acc.fmt
        self.acc, self.t, self.n = acc, acc.transport, len(xs[0])
        data = fmt.encode_tensors(xs, [bool(q.get("bipolar")) for q in acc._qins])
        self.stats = acc.stats = RunStats(inferences=self.n)
        acc._batch = acc.batch or max(1, min(fmt.max_batch, -(-self.n // 4)))
        self.frames = []                  # (first inference, count, payload) of each frame
        for start in range(0, self.n, acc._batch):
            count = min(acc._batch, self.n - start)
            self.frames.append((start, count, data[start * fmt.in_bytes:(start + count) * fmt.in_bytes]))
        self.results: list = [None] * len(self.frames)
        self.todo = list(range(len(self.frames)))[::-1]      # frames not sent yet, next last
        self.outstanding: dict[int, _Pending] = {}           # frames in flight by sequence number
        self.order = 0                    # sends so far (orders the frames in flight)
        self.done = 0                     # frames answered
        self.parser = P.FrameParser(acc._payload_len)
        self.timeout = acc._timeout()
        self.deadline = acc.deadline if acc.deadline is not None else acc.default_deadline(self.n)

    def run(self) -> list[np.ndarray]:
        """Exchange frames until every result is back; each output's results in input order."""
        acc, t = self.acc, self.t
        self.session = acc._run_session()
        t0 = self.last_rx = acc._claim_link()
        self.end = t0 + self.deadline
        while self.done < len(self.frames):
            self._fill_window()
            self._step()
        acc._release_link(self.stats, self.parser, t0)
        return [np.concatenate([r[k] for r in self.results]) for k in range(len(self.results[0]))]

    def _fill_window(self) -> None:
        """Send frames not sent yet while fewer than ``window`` are in flight."""
        acc = self.acc
        while self.todo and len(self.outstanding) < acc.window:
            k = self.todo.pop()
            seq = acc._next_seq()
            start, count, payload = self.frames[k]
            e = _Pending(k, count, P.encode_frame(P.T_DATA, self.session, seq, count, payload))
            stale = self.outstanding.pop(seq, None)
            assert stale is None
            self.outstanding[seq] = e
            self._send(e)

    def _step(self) -> None:
        """Resend the frames that timed out, or read and take what the board sent until the
        next time-out; :class:`LinkError` at the deadline."""
        t = self.t
        now = t.now()
        if now >= self.end:
            raise self._expired()
        due = min(e.sent for e in self.outstanding.values()) + self.timeout
        if now >= due:
            if now - self.last_rx >= self.timeout:
                self.parser.reset()                 # the link went quiet: drop a partial frame
            for e in sorted(self.outstanding.values(), key=lambda e: e.order):
                if now >= e.sent + self.timeout:
                    self._send(e, "no answer")
            return
        chunk = t.read(4096, min(due, self.end) - now)
        if not chunk:
            return
        self.last_rx = t.now()
        self.stats.bytes_in += len(chunk)
        for f in self.parser.feed(chunk):
            self._take(f)

    def _take(self, f) -> None:
        """Account for one frame from the board: a result is kept, an error report on a frame
        in flight sends it again, anything else is counted and dropped."""
        stats, session = self.stats, self.session
        if not f.ok:
            stats.crc_errors += 1
            return
        if f.type == P.T_ERROR and f.session in (session, P.NO_SESSION):
            stats.board_errors[f.count] += 1
        if f.session != session:
            stats.stale += f.session != P.NO_SESSION
            return
        e = self.outstanding.get(f.seq)
        if f.type == P.T_ERROR:
            if e is not None:
                self._send(e, f"board: {P.ERROR_CODES.get(f.count, f'error {f.count}')}")
            return
        if e is None or f.count != e.count:
            stats.duplicates += 1                 # an answer already taken
            return
        self._keep(f, e)

    def _keep(self, f, e: _Pending) -> None:
        """Keep the result ``f`` of the frame ``e``; frames sent before ``e`` and still in
        flight were lost on the way and are sent again."""
        self.results[e.index] = self.acc.fmt.decode_tensors(f.payload, f.count,
                                                             [bool(q.get("bipolar")) for q in self.acc._qouts])
        del self.outstanding[f.seq]
        self.done += 1
        for other in sorted(self.outstanding.values(), key=lambda o: o.order):
            if other.order < e.order:             # overtaken: it was lost on the way
                self._send(other, "overtaken")

    def _send(self, e: _Pending, why=None) -> None:
        """Send the frame ``e`` (again, for the reason ``why``; :class:`LinkError` once it
        was sent ``retries`` times more)."""
        acc, t, stats = self.acc, self.t, self.stats
        if why is not None:
            e.why.append(why)
            if e.attempts > acc.retries:
                first = self.frames[e.index][0]
                raise LinkError(f"{t.name}: inferences {first}..{first + e.count - 1} failed after "
                                f"{acc.retries} retries ({', '.join(e.why[-3:])}); check the port, "
                                f"baud rate and that the board runs this build")
            stats.resent += 1
        e.attempts += 1
        self.order += 1
        e.order = self.order
        t.write(e.frame)
        e.sent = t.now()
        stats.frames += 1
        stats.bytes_out += len(e.frame)

    def _expired(self) -> LinkError:
        """The error of a run past its deadline: the results still expected and what came."""
        stats, parser = self.stats, self.parser
        left = sorted([self.frames[e.index][0] for e in self.outstanding.values()]
                      + [self.frames[k][0] for k in self.todo])
        first = left[0]
        stats.noise_bytes = parser.junk
        return LinkError(
            f"{self.t.name}: no valid answer within the {self.deadline:.3g} s deadline; expected the results "
            f"of inferences {first}..{self.n - 1} ({len(self.outstanding) + len(self.todo)} more RESULT frames "
            f"of session {self.session:#06x}), received {stats.bytes_in} bytes: {self.done} good results, "
            f"{stats.crc_errors} frames with a bad CRC, {stats.stale} of other sessions, "
            f"{parser.junk} bytes of noise; check the port, baud rate and that the board runs this build")


def _model_shape(q: dict) -> tuple:
    """The ONNX model's shape of one inference of the input whose quantizer record is ``q``
    (NCHW when the model's input is an image)."""
    if q.get("model_shape"):
        return tuple(q["model_shape"])
    s = tuple(q["shape"])
    return (s[2], s[0], s[1]) if q["nchw_to_nhwc"] else s


def _quantize_one(q: dict, quantizer, x, named: bool) -> np.ndarray:
    """One model input's float array -> its integer NHWC tensor (see :meth:`Accelerator.quantize`);
    errors name the input when ``named``."""
    x = np.asarray(x)
    want = _model_shape(q)
    shape = tuple(q["shape"])
    what, one = (f"input {q['name']!r}",) * 2 if named else ("inputs", "input")
    if q.get("integer_input"):  # the model takes its integer codes (TFLite int8): passed through
        if x.dtype.kind not in "iu":
            raise ValueError(f"{what} must be an integer array (the model's input is its integer codes), "
                             f"not {x.dtype}")
    elif x.dtype.kind != "f":
        raise ValueError(f"{what} must be a float array (the model's input is float32), not {x.dtype}"
                         + ("; integer tensors for the hardware need --raw" if x.dtype.kind in "iu" else ""))
    if x.ndim < 1 or x.shape[0] < 1:
        raise ValueError(f"{what} of shape {x.shape!r} hold no inferences (batch first)")
    if x.shape[1:] != want:
        raise ValueError(f"{what} have shape {x.shape!r}; the model takes (N, {', '.join(map(str, want))})")
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        raise ValueError(f"{what} contain NaN or infinite values")
    if q["nchw_to_nhwc"] and x.ndim < 3:
        raise ValueError(f"{one} of shape {x.shape!r} has no channel axis to move")
    if int(np.prod(x.shape[1:])) != int(np.prod(shape)):
        raise ValueError(f"{one} of shape {x.shape!r} does not hold {int(np.prod(shape))} elements "
                         f"per inference (batch first)")
    return quantizer.quantize(x, shape)


def sim_transport(info: dict, baud: float, *, pipeline=None, **options) -> SimulatedLink:
    """A simulated link to the board top of this build (:func:`~onnx2hw.driver.native_transport.board_transport`)."""
    if pipeline is None:
        src = info.get("source") or {}
        if not src.get("model"):
            raise ModelError("this build description does not name its model; pass pipeline= to "
                             "simulate it")
        folding = {k: tuple(v) for k, v in info["pipeline"].get("folding", {}).items()}
        ig = integer_graph_of(load_graph(src["model"]), src.get("calib"), tuple(src.get("host") or ()))
        pipeline = compile_pipeline(ig, family=info["pipeline"]["family"], folding=folding or None)
    if pipeline.describe() != info["pipeline"]:
        raise ModelError("the rebuilt design does not match the build description "
                         "(model or compiler changed since the build)")
    data = selftest_data(info)
    top = BoardTop(AcceleratorCore(pipeline), link_format_of(pipeline), info["clock_hz"], baud,
                   selftest=None if data is None else data.inputs)
    return board_transport(top, **options)
