// Native board-top harness: the Verilated board top exchanging UART bytes with a host program
// through its standard input and output, no Python per cycle.
//
// Compiled with the design's Verilator model (class `Vtop`: the board top, module `top`, in the
// wrapper of onnx2hw.sim.native_run.reset_wrapper, which has a `clk` input and makes the reset,
// high for the first two rising edges, and passes `uart_rx`/`uart_tx` through). The host side is
// onnx2hw.driver.native_transport.NativeTransport.
//
// Usage: sim BIT_CYCLES. BIT_CYCLES (a real number) is the host bridge's bit time in clock
// cycles: the design's baud divisor times (1 + the bridge's baud error).
//
// Time is the cycle count c: cycle c is the period ending with rising edge c + 1 after reset.
// uart_rx is set before the falling-edge evaluation and held through the rising edge; uart_tx is
// read after the rising edge. Simulated time advances only inside a run command.
//
// Commands on standard input (integers little-endian):
//   'B' u32 n, then n bytes: queue bytes for uart_rx (8N1, LSB first, at BIT_CYCLES per bit);
//   'P' u64 n: queue a pause: the line stays idle n cycles before the next queued byte starts;
//   'R' u64 until: run until a byte is decoded from uart_tx or cycle `until` is reached; the
//       answer is u64 cycle (the cycle reached), i32 byte (-1: none);
//   'Q': stop (so does the end of standard input).
// uart_tx is decoded as a USB-UART bridge does: a falling edge from idle starts a byte, bit k is
// sampled (1.5 + k) bit times after it, and a low stop bit (9.5 bit times) is a framing error:
// the byte is lost, and the next start bit needs the line high first.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>

#include "Vtop.h"
#include "verilated.h"

namespace {

[[noreturn]] void die(const char* msg) {
    std::fprintf(stderr, "onnx2hw native board harness: %s\n", msg);
    std::exit(2);
}

bool read_exact(void* buf, std::size_t n) {
    return n == 0 || std::fread(buf, 1, n, stdin) == n;
}

// An item of the uart_rx queue: a byte (pause < 0) or an idle pause of `pause` cycles.
struct Item {
    int byte;
    int64_t pause;
};

struct Board {
    std::unique_ptr<VerilatedContext> ctx;
    std::unique_ptr<Vtop> top;
    double bit;
    uint64_t cyc = 0;
    // uart_rx: the byte on the line (10 levels from `start`) and when the line is next free
    std::deque<Item> queue;
    bool sending = false;
    int levels[10] = {0};
    double start = 0, free_at = 0;
    // uart_tx decoder: the start edge of the byte being received, or none
    bool receiving = false, prev_tx = true;
    double edge = 0;
    int sample = 0, value = 0;

    void step_rx() {
        while (!sending && !queue.empty() && double(cyc) >= free_at) {
            Item it = queue.front();
            queue.pop_front();
            if (it.pause >= 0) {
                free_at = double(cyc) + double(it.pause);
                continue;
            }
            sending = true;
            start = double(cyc);
            levels[0] = 0;
            for (int k = 0; k < 8; ++k) levels[k + 1] = (it.byte >> k) & 1;
            levels[9] = 1;
            free_at = start + 10 * bit;
        }
        int level = 1;
        if (sending) {
            double k = std::floor((double(cyc) - start) / bit);
            if (k < 10) {
                level = levels[int(k)];
            } else {
                sending = false;
                step_rx();
                return;
            }
        }
        top->uart_rx = level;
    }

    // the uart_tx level after rising edge `cyc`; a decoded byte, or -1
    int step_tx() {
        const bool tx = top->uart_tx;
        int out = -1;
        if (!receiving) {
            if (prev_tx && !tx) {
                receiving = true;
                edge = double(cyc);
                sample = 0;
                value = 0;
            }
        } else if (double(cyc) >= edge + (1.5 + sample) * bit) {
            if (sample < 8) {
                value |= int(tx) << sample;
                ++sample;
            } else {
                receiving = false;
                if (tx) out = value;
            }
        }
        prev_tx = tx;
        return out;
    }

    // one clock cycle; the byte decoded at its end, or -1
    int cycle() {
        step_rx();
        top->clk = 0;
        top->eval();
        top->clk = 1;
        top->eval();
        int b = step_tx();
        ++cyc;
        return b;
    }
};

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) die("usage: sim BIT_CYCLES");
    Board b;
    b.bit = std::atof(argv[1]);
    if (!(b.bit >= 2)) die("BIT_CYCLES must be a number of cycles, at least 2");
    b.ctx = std::make_unique<VerilatedContext>();
    b.ctx->fatalOnError(false);
    b.top = std::make_unique<Vtop>(b.ctx.get(), "top");
    Vtop* top = b.top.get();
    top->uart_rx = 1;
    for (int i = 0; i < 2; ++i) {   // reset (made by the wrapper): two rising edges, the line idle
        top->clk = 0;
        top->eval();
        top->clk = 1;
        top->eval();
    }
    b.prev_tx = top->uart_tx;
    for (;;) {
        int cmd = std::fgetc(stdin);
        if (cmd == EOF || cmd == 'Q') break;
        if (cmd == 'B') {
            uint32_t n;
            if (!read_exact(&n, 4)) die("truncated command B");
            for (uint32_t i = 0; i < n; ++i) {
                int c = std::fgetc(stdin);
                if (c == EOF) die("truncated command B");
                b.queue.push_back(Item{c, -1});
            }
        } else if (cmd == 'P') {
            uint64_t n;
            if (!read_exact(&n, 8)) die("truncated command P");
            b.queue.push_back(Item{0, int64_t(n)});
        } else if (cmd == 'R') {
            uint64_t until;
            if (!read_exact(&until, 8)) die("truncated command R");
            int32_t got = -1;
            while (b.cyc < until && got < 0) got = b.cycle();
            uint64_t reached = b.cyc;
            std::fwrite(&reached, 8, 1, stdout);
            std::fwrite(&got, 4, 1, stdout);
            std::fflush(stdout);
        } else {
            die("unknown command");
        }
    }
    top->final();
    return 0;
}
