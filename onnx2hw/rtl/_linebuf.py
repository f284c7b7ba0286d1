"""Parameter normalisation, geometry and a counter with a registered last flag, shared by the
window and pooling blocks."""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Mux, Shape, Signal

__all__ = ["pair", "quad", "shape_of", "Geometry", "clog2", "ram_cost", "RamCost", "Counter",
           "EBR_SHAPES", "EBR_PER_ADDR", "ebr_tiling", "ebr_slices", "bram_blocks", "lands", "row_mux"]


def clog2(n: int) -> int:
    """Bits needed to count ``n`` distinct values (``ceil(log2(n))``, 0 for ``n <= 1``)."""
    return max(0, (int(n) - 1).bit_length())


def _pos_int(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, not {value!r}")
    return value


def pair(name, value, minimum=1) -> tuple[int, int]:
    """``value`` as an ``(h, w)`` pair of integers >= ``minimum`` (an int means both)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be an integer or a pair of integers, not {value!r}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise ValueError(f"{name} entries must be integers >= {minimum}, not {value!r}")
    return int(value[0]), int(value[1])


def quad(name, value) -> tuple[int, int, int, int]:
    """Padding ``(top, left, bottom, right)``; an int means all four, a pair (h, w) both sides."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,) * 4
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        value = (value[0], value[1], value[0], value[1])
    if not isinstance(value, (tuple, list)) or len(value) != 4:
        raise TypeError(f"{name} must be an integer, (h, w) or (top, left, bottom, right), "
                        f"not {value!r}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} entries must be integers >= 0, not {value!r}")
    return tuple(int(v) for v in value)


def shape_of(elem_shape) -> Shape:
    """Cast ``elem_shape`` to a plain integer ``Shape`` (``signed(w)``/``unsigned(w)``)."""
    try:
        shape = Shape.cast(elem_shape)
    except TypeError as exc:
        raise TypeError(f"elem_shape must be signed(w) or unsigned(w), not {elem_shape!r}") from exc
    if not isinstance(elem_shape, Shape) and not isinstance(elem_shape, int):
        raise TypeError(f"elem_shape must be signed(w) or unsigned(w), not {elem_shape!r}")
    if shape.width < 1:
        raise ValueError(f"elem_shape must be at least 1 bit wide, not {elem_shape!r}")
    return shape


@dataclass(frozen=True)
class Geometry:
    """Validated image/kernel geometry of a window or pooling block."""

    height: int
    width: int
    channels: int
    kh: int
    kw: int
    sh: int
    sw: int
    pads: tuple  # (top, left, bottom, right)
    simd: int
    dh: int = 1   # dilation: kernel tap (i, j) reads input offset (i*dh, j*dw)
    dw: int = 1

    @classmethod
    def make(cls, height, width, channels, kernel, stride, pads, dilation, simd):
        height = _pos_int("height", height)
        width = _pos_int("width", width)
        channels = _pos_int("channels", channels)
        simd = _pos_int("simd", simd)
        kh, kw = pair("kernel", kernel)
        sh, sw = pair("stride", stride)
        dh, dw = pair("dilation", dilation)
        pads = quad("pads", pads)
        if channels % simd:
            raise ValueError(f"simd {simd!r} must divide channels {channels!r}")
        top, left, bottom, right = pads
        eh, ew = (kh - 1) * dh + 1, (kw - 1) * dw + 1
        if height + top + bottom < eh or width + left + right < ew:
            raise ValueError(f"kernel {(kh, kw)!r} of extent {(eh, ew)!r} (dilation {(dh, dw)!r}) larger than "
                             f"the padded image {(height + top + bottom, width + left + right)!r}")
        return cls(height, width, channels, kh, kw, sh, sw, pads, simd, dh, dw)

    @property
    def fold(self) -> int:
        """Transfers per pixel (``channels / simd``)."""
        return self.channels // self.simd

    @property
    def eh(self) -> int:
        """Rows one window spans: ``(kh - 1) * dh + 1``."""
        return (self.kh - 1) * self.dh + 1

    @property
    def ew(self) -> int:
        """Columns one window spans: ``(kw - 1) * dw + 1``."""
        return (self.kw - 1) * self.dw + 1

    @property
    def out_h(self) -> int:
        return (self.height + self.pads[0] + self.pads[2] - self.eh) // self.sh + 1

    @property
    def out_w(self) -> int:
        return (self.width + self.pads[1] + self.pads[3] - self.ew) // self.sw + 1

    @property
    def in_transfers(self) -> int:
        return self.height * self.width * self.fold

    @property
    def out_pixels(self) -> int:
        return self.out_h * self.out_w


#: (data bits, words) of the shapes an ECP5 block RAM (DP16KD, PDPW16KD) takes
EBR_SHAPES = ((36, 512), (18, 1024), (9, 2048), (4, 4096), (2, 8192), (1, 16384))


def ebr_tiling(depth: int, width: int) -> tuple[int, int]:
    """``(blocks, words per block)`` of the tiling of a ``depth`` x ``width`` memory into the
    fewest ECP5 block RAMs (the deeper shape on a tie), as Yosys chooses it."""
    blocks, neg_words = min((-(-width // dw) * -(-depth // dd), -dd) for dw, dd in EBR_SHAPES)
    return blocks, -neg_words


#: block RAMs one copy of an address (and enable) drives: a memory in block RAM wider than this is
#: split by width into slices of this many blocks, each with copies of its own (one address
#: register driving every block of a wide memory is a net across the chip)
EBR_PER_ADDR = 2


def ebr_slices(depth: int, width: int) -> list[tuple[int, int]]:
    """Bit ranges ``[(lo, hi)]`` of the :data:`EBR_PER_ADDR`-block-wide slices of a ``depth`` x
    ``width`` memory in block RAM (its :func:`ebr_tiling` blocks' data width times
    :data:`EBR_PER_ADDR`)."""
    step = dict((d, w) for w, d in EBR_SHAPES)[ebr_tiling(depth, width)[1]] * EBR_PER_ADDR
    return [(lo, min(lo + step, width)) for lo in range(0, width, step)]


def bram_blocks(depth: int, word: int, family: str = "ecp5") -> int:
    """Block RAMs (ECP5 DP16KD, iCE40 SB_RAM40_4K) of a ``depth`` x ``word`` memory in block RAM."""
    if family == "ice40":
        return min(-(-depth // d) * -(-word // w) for d, w in ((256, 16), (512, 8), (1024, 4), (2048, 2)))
    return ebr_tiling(depth, word)[0]


@dataclass(frozen=True)
class RamCost:
    """Estimated mapping of one simple dual-port RAM with a synchronous read port."""

    ebr: int      # DP16KD / SB_RAM40_4K blocks
    lutram: int   # TRELLIS_DPR16X4 cells (16x4 bits each)
    lut: int      # LUT4s around the RAM (read mux of LUTRAM banks, write decode, FF-RAM logic)
    ff: int       # flip-flops (read register, RAM held in FFs)

    @property
    def lut_equiv(self) -> int:
        """LUT4s plus six per LUTRAM cell (4 of storage, 2 of write port), as ``yosys_stat``."""
        return self.lut + 6 * self.lutram


def lands(depth: int, word: int, family: str = "ecp5") -> bool:
    """Whether a RAM's read data lands in a fabric register before any logic: it is in block
    RAM (:func:`ram_cost`), whose read data comes late after the clock (:mod:`~.ram_outreg`)."""
    return ram_cost(depth, word, family).ebr > 0


def row_mux(regs, sel):
    """The register of ``regs`` (one per block row) that ``sel`` names (the last for any
    larger ``sel``)."""
    out = regs[-1]
    for k in range(len(regs) - 2, -1, -1):
        out = Mux(sel == k, regs[k], out)
    return out


def ram_cost(depth: int, word: int, family: str = "ecp5", *, transparent: bool = False) -> RamCost:
    """How Yosys (0.5x, ``memory_libmap``) maps a ``depth`` x ``word`` RAM; fitted to ``stat``.

    ECP5: Yosys picks the cheaper by its costs: 4 per ``TRELLIS_DPR16X4`` cell plus about one
    per bit per extra 16-word bank (the read multiplexer), against 128 per ``DP16KD`` (fitted
    on 16..128 words of 16..144 bits). Tiny transparent RAMs (at most 4 words of at most 16
    bits) become flip-flops.
    """
    if family == "ice40":
        return RamCost(ebr=bram_blocks(depth, word, family), lutram=0, lut=2 * word, ff=word)
    bits = depth * word
    if transparent and depth <= 4 and bits <= 64:
        return RamCost(ebr=0, lutram=0, lut=2 * bits, ff=bits)
    banks = -(-depth // 16)
    cells = banks * -(-word // 4)
    ebr = bram_blocks(depth, word)
    if 4 * cells + word * (banks - 1) < 128 * ebr:
        mux = word * (banks - 1 + max(0, banks - 8)) + (banks if banks > 1 else 0)
        return RamCost(ebr=0, lutram=cells, lut=mux + (word if transparent else 0), ff=word)
    return RamCost(ebr=ebr, lutram=0, lut=20 + 2 * ebr + (word if transparent else 0),
                   ff=2 * word + 6)


class Counter:
    """A counter over ``0 .. n-1`` with its ``value == n - 1`` test held in a register
    (``last``), so the control logic never compares a counter with a constant on its path."""

    def __init__(self, n, name):
        self.n = n
        self.value = Signal(range(max(n, 2)), name=name)
        self.last = Signal(name=f"{name}_last", init=int(n == 1))

    def inc(self):
        """Statements for ``value + 1`` (``value`` is not the last)."""
        return [self.value.eq(self.value + 1), self.last.eq(self.value == self.n - 2)]

    def clear(self):
        """Statements for ``value = 0``."""
        return [self.value.eq(0), self.last.eq(int(self.n == 1))]

    def wrap(self):
        """Statements for ``value + 1``, back to 0 after the last."""
        return [self.value.eq(Mux(self.last, 0, self.value + 1)),
                self.last.eq(Mux(self.last, int(self.n == 1), self.value == self.n - 2))]
