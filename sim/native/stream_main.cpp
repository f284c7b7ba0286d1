// Native stream harness: drives a Verilated design's stream ports, no Python and no VPI per cycle.
//
// Compiled with the design's Verilator model (class `Vtop`: module `top` in the wrapper of
// onnx2hw.sim.native_run.reset_wrapper, which has a `clk` input and makes the reset, high for the
// first two rising edges) and a header written per design by onnx2hw.sim.native_run
// (`onnx2hw_ports.h`): ONNX2HW_PORTS(SRC, SNK) lists every stream port, in the order of
// onnx2hw.sim._stream.stream_ports, as SRC(pay, valid, ready, P) (an input) or SNK(...) (an
// output): the members of Vtop for the Verilog ports P__payload, P__valid and P__ready
// (Verilator's encoding of the names), and P, the port's name.
//
// Usage: sim RUNDIR. RUNDIR/config.txt holds `key value` lines (max_cycles, idle_limit, drain,
// src_kind, sink_kind, and per port k: seed<k>, len<k> (inputs), want<k>, checked<k>, expect<k>
// (outputs)); input port P's transfers are read from in_P.bin, output port P's written to out_P.bin,
// each transfer as the little-endian 32-bit words of its flat payload (Verilator's word layout: one
// word up to 32 bits, two up to 64, ceil(w/32) above). An output with expect<k> = 1 is compared
// with exp_P.bin as it is collected (the run goes on; the first differing transfer and its cycle
// are reported). The result is written to RUNDIR/result.txt as `key value` lines.
//
// Each cycle is what onnx2hw.sim._harness's Verilog wrapper does, with the same cycle numbering,
// the same pause patterns (none, 3of4, random: bit 31 of a xorshift32 sequence per port, state
// for cycle 0 one step from the port's seed) and the same checks, error codes and result values:
//  * reset is high for the first two rising edges; cycle c is the period ending with rising edge
//    c + 1 after reset;
//  * an input's valid is high while it holds an offered transfer, or when transfers are left and
//    its pause allows; its payload is the next transfer (the last one once all are sent);
//  * an output's ready is high once its count is reached or when its pause allows;
//  * outputs: valid held and payload stable from valid & ~ready until the transfer; no transfer
//    beyond the expected count on a checked port;
//  * the run ends `drain` cycles after every output has its transfers and every input is
//    consumed, or on a time-out, a deadlock (no transfer for idle_limit cycles) or a violation.
// The design's inputs are set before the falling-edge evaluation and held through the rising
// edge, so the design sees them for the whole cycle, as in the wrapper.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "Vtop.h"
#include "verilated.h"
#if VM_TRACE_FST
#include "verilated_fst_c.h"
using Trace = VerilatedFstC;
#define ONNX2HW_WAVE "/dump.fst"
#elif VM_TRACE
#include "verilated_vcd_c.h"
using Trace = VerilatedVcdC;
#define ONNX2HW_WAVE "/dump.vcd"
#endif
#include "onnx2hw_ports.h"

namespace {

enum Error { OK = 0, TIMEOUT = 1, DEADLOCK = 2, VALID_DROP = 3, PAYLOAD_CHANGED = 4, EXTRA = 5 };

uint32_t xs32(uint32_t x) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return x;
}

// A payload port of the model as 32-bit words: CData/SData/IData/QData or VlWide<N>.
struct Payload {
    void* ptr;
    int bytes;   // size of the model's member (1, 2, 4, 8, or 4 * N for VlWide<N>)
    int words;   // 32-bit words of a transfer in the files
    void set(const uint32_t* w) const {
        if (bytes <= 8) {
            uint64_t v = w[0] | (words > 1 ? uint64_t(w[1]) << 32 : 0);
            std::memcpy(ptr, &v, bytes);   // little-endian: the low bytes
        } else {
            std::memcpy(ptr, w, 4 * words);
        }
    }
    void get(uint32_t* w) const {
        if (bytes <= 8) {
            uint64_t v = 0;
            std::memcpy(&v, ptr, bytes);
            w[0] = uint32_t(v);
            if (words > 1) w[1] = uint32_t(v >> 32);
        } else {
            std::memcpy(w, ptr, 4 * words);
        }
    }
};

template <class T>
Payload payload_of(T& member) {
    static_assert(sizeof(T) <= 8, "integral payload member");
    return Payload{&member, int(sizeof(T)), sizeof(T) > 4 ? 2 : 1};
}

template <std::size_t N>
Payload payload_of(VlWide<N>& member) {
    return Payload{member.data(), int(4 * N), int(N)};
}

struct Port {
    std::string name;
    bool is_input;
    Payload pay;
    CData* valid;
    CData* ready;
    uint32_t lfsr = 0, seed = 1;
    uint64_t stalls = 0;
    std::vector<uint32_t> data;   // inputs: the transfers; outputs: the collected ones
    std::vector<uint32_t> expect; // outputs compared as collected
    uint64_t len = 0, idx = 0;    // inputs
    bool holding = false;
    uint64_t want = 0, got = 0;   // outputs
    bool checked = false, compare = false, stalled = false;
    std::vector<uint32_t> held, cur;
    int64_t mismatch = -1;        // first transfer differing from expect, and its cycle
    uint64_t mismatch_cycle = 0;
    std::vector<uint32_t> err_stalled, err_payload;
};

[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "onnx2hw native harness: %s\n", msg.c_str());
    std::exit(2);
}

std::map<std::string, uint64_t> read_config(const std::string& path) {
    std::map<std::string, uint64_t> cfg;
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) die("cannot open " + path);
    char key[128];
    unsigned long long v;
    while (std::fscanf(f, "%127s %llu", key, &v) == 2) cfg[key] = v;
    std::fclose(f);
    return cfg;
}

uint64_t need(const std::map<std::string, uint64_t>& cfg, const std::string& key) {
    auto it = cfg.find(key);
    if (it == cfg.end()) die("config lacks " + key);
    return it->second;
}

std::vector<uint32_t> read_words(const std::string& path, uint64_t count, int words) {
    std::vector<uint32_t> v(count * words);
    if (count == 0) return v;
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) die("cannot open " + path);
    if (std::fread(v.data(), 4 * words, count, f) != count) die(path + " holds fewer transfers than the config says");
    std::fclose(f);
    return v;
}

void write_words(const std::string& path, const std::vector<uint32_t>& v) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) die("cannot write " + path);
    if (!v.empty() && std::fwrite(v.data(), 4, v.size(), f) != v.size()) die("cannot write " + path);
    std::fclose(f);
}

std::string hex(const std::vector<uint32_t>& w) {
    std::string s;
    char buf[16];
    bool lead = true;
    for (std::size_t i = w.size(); i-- > 0;) {
        if (lead) {
            if (w[i] == 0 && i > 0) continue;
            std::snprintf(buf, sizeof buf, "%x", w[i]);
            lead = false;
        } else {
            std::snprintf(buf, sizeof buf, "%08x", w[i]);
        }
        s += buf;
    }
    return s;
}

struct Harness {
    std::unique_ptr<VerilatedContext> ctx;
    std::unique_ptr<Vtop> top;
    std::vector<Port> ports;
#if VM_TRACE
    std::unique_ptr<Trace> trace;
#endif
    uint64_t time = 0;

    void add(const char* name, bool is_input, Payload pay, CData* valid, CData* ready) {
        Port p;
        p.name = name;
        p.is_input = is_input;
        p.pay = pay;
        p.valid = valid;
        p.ready = ready;
        p.held.assign(pay.words, 0);
        p.cur.assign(pay.words, 0);
        ports.push_back(std::move(p));
    }

    void eval() {
        top->eval();
#if VM_TRACE
        if (trace) trace->dump(time);
#endif
        time += 5;
    }

    // one clock period: the low half with the inputs as set, then the rising edge
    void low() {
        top->clk = 0;
        eval();
    }
    void rise() {
        top->clk = 1;
        eval();
    }
};

bool pause_allows(uint64_t kind, uint64_t cyc, uint32_t lfsr) {
    return kind == 0 ? true : kind == 1 ? (cyc & 3) == 3 : kind == 2 ? (lfsr >> 31) != 0 : false;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) die("usage: sim RUNDIR");
    const std::string dir = argv[1];
    auto cfg = read_config(dir + "/config.txt");
    Harness h;
    h.ctx = std::make_unique<VerilatedContext>();
    h.ctx->fatalOnError(false);
    h.top = std::make_unique<Vtop>(h.ctx.get(), "top");
    Vtop* top = h.top.get();
#define ONNX2HW_SRC(pay, valid, ready, name) h.add(#name, true, payload_of(top->pay), &top->valid, &top->ready);
#define ONNX2HW_SNK(pay, valid, ready, name) h.add(#name, false, payload_of(top->pay), &top->valid, &top->ready);
    ONNX2HW_PORTS(ONNX2HW_SRC, ONNX2HW_SNK)
#if VM_TRACE
    if (cfg.count("trace") && cfg["trace"]) {
        h.ctx->traceEverOn(true);
        h.trace = std::make_unique<Trace>();
        top->trace(h.trace.get(), 99);
        h.trace->open((dir + ONNX2HW_WAVE).c_str());
    }
#endif
    const uint64_t max_cycles = need(cfg, "max_cycles"), idle_limit = need(cfg, "idle_limit"),
                   drain = need(cfg, "drain"), src_kind = need(cfg, "src_kind"),
                   sink_kind = need(cfg, "sink_kind");
    for (std::size_t k = 0; k < h.ports.size(); ++k) {
        Port& p = h.ports[k];
        const std::string n = std::to_string(k);
        p.seed = uint32_t(need(cfg, "seed" + n));
        if (p.is_input) {
            p.len = need(cfg, "len" + n);
            p.data = read_words(dir + "/in_" + p.name + ".bin", p.len, p.pay.words);
        } else {
            p.want = need(cfg, "want" + n);
            p.checked = need(cfg, "checked" + n) != 0;
            p.compare = cfg.count("expect" + n) && cfg["expect" + n] != 0;
            if (p.compare) p.expect = read_words(dir + "/exp_" + p.name + ".bin", p.want, p.pay.words);
            p.data.reserve(p.want * p.pay.words);
        }
    }

    // reset (made by the wrapper): two rising edges, stream inputs low
    for (Port& p : h.ports) *(p.is_input ? p.valid : p.ready) = 0;
    for (int i = 0; i < 2; ++i) {
        h.low();
        h.rise();
    }
    for (Port& p : h.ports) p.lfsr = xs32(p.seed);

    uint64_t cyc = 0, last_xfer = 0, last_out = 0, done_at = 0, err_cycle = 0;
    bool any_out = false, done_seen = false;
    int err = OK, err_port = 0;
    const std::vector<uint32_t> zero(8, 0);
    for (;;) {
        // drive: what the wrapper's combinational logic gives in cycle `cyc`
        bool finished = true;
        for (Port& p : h.ports) {
            if (p.is_input) {
                bool more = p.idx < p.len;
                finished &= !more;
                *p.valid = p.holding || (more && pause_allows(src_kind, cyc, p.lfsr));
                if (p.len) p.pay.set(&p.data[(p.idx < p.len ? p.idx : p.len - 1) * p.pay.words]);
            } else {
                bool full = p.got >= p.want;
                finished &= full;
                *p.ready = full || pause_allows(sink_kind, cyc, p.lfsr);
            }
        }
        h.low();
        // the rising edge: the wrapper's clocked block, on the values of this cycle
        err_cycle = cyc;
        if (cyc >= max_cycles) { err = TIMEOUT; break; }
        if (cyc - last_xfer > idle_limit) { err = DEADLOCK; break; }
        if (finished && (done_seen ? cyc - done_at >= drain : drain == 0)) {
            if (!done_seen) done_at = cyc;
            break;
        }
        if (finished && !done_seen) { done_at = cyc; done_seen = true; }
        bool any = false, bad = false;
        for (std::size_t k = 0; k < h.ports.size(); ++k) {
            Port& p = h.ports[k];
            uint32_t lfsr = p.lfsr;
            p.lfsr = xs32(lfsr);
            if (p.is_input) continue;
            bool full = p.got >= p.want, valid = *p.valid, ready = *p.ready;
            p.pay.get(p.cur.data());
            if (!bad && p.stalled && (!valid || p.cur != p.held)) {
                bad = true;
                err = valid ? PAYLOAD_CHANGED : VALID_DROP;
                err_port = int(k);
                p.err_stalled = p.held;
                p.err_payload = p.cur;
            } else if (!bad && valid && ready) {
                any = true;
                p.stalled = false;
                if (!full) {
                    if (p.compare && p.mismatch < 0 &&
                        std::memcmp(p.cur.data(), &p.expect[p.got * p.pay.words], 4 * p.pay.words) != 0) {
                        p.mismatch = int64_t(p.got);
                        p.mismatch_cycle = cyc;
                    }
                    p.data.insert(p.data.end(), p.cur.begin(), p.cur.end());
                    ++p.got;
                    last_out = cyc;
                    any_out = true;
                } else if (p.checked) {
                    bad = true;
                    err = EXTRA;
                    err_port = int(k);
                }
            } else {
                p.stalled = valid;
                p.held = p.cur;
            }
            if (!full && !ready) ++p.stalls;
        }
        if (!bad) {
            for (Port& p : h.ports) {
                if (!p.is_input) continue;
                bool more = p.idx < p.len, valid = *p.valid;
                if (valid && *p.ready) {
                    ++p.idx;
                    p.holding = false;
                    any = true;
                } else {
                    p.holding = valid;
                }
                if (more && !valid) ++p.stalls;
            }
        }
        h.rise();
        if (bad) break;
        if (any) last_xfer = cyc;
        ++cyc;
    }
#if VM_TRACE
    if (h.trace) h.trace->close();
#endif
    top->final();

    FILE* r = std::fopen((dir + "/result.txt").c_str(), "w");
    if (!r) die("cannot write result.txt");
    std::fprintf(r, "err_code %d\nerr_port %d\nerr_cycle %llu\ncyc %llu\nlast_out %llu\nany_out %d\ndone_at %llu\n",
                 err, err_port, (unsigned long long)err_cycle, (unsigned long long)cyc,
                 (unsigned long long)last_out, int(any_out), (unsigned long long)done_at);
    for (std::size_t k = 0; k < h.ports.size(); ++k) {
        Port& p = h.ports[k];
        std::fprintf(r, "stalls%zu %llu\n", k, (unsigned long long)p.stalls);
        if (p.is_input) {
            std::fprintf(r, "idx%zu %llu\n", k, (unsigned long long)p.idx);
        } else {
            std::fprintf(r, "got%zu %llu\n", k, (unsigned long long)p.got);
            std::fprintf(r, "err_stalled%zu 0x%s\nerr_payload%zu 0x%s\n", k,
                         hex(p.err_stalled.empty() ? std::vector<uint32_t>(1, 0) : p.err_stalled).c_str(), k,
                         hex(p.err_payload.empty() ? std::vector<uint32_t>(1, 0) : p.err_payload).c_str());
            if (p.compare && p.mismatch >= 0)
                std::fprintf(r, "mismatch%zu %lld\nmismatch_cycle%zu %llu\n", k, (long long)p.mismatch, k,
                             (unsigned long long)p.mismatch_cycle);
            write_words(dir + "/out_" + p.name + ".bin", p.data);
        }
    }
    std::fclose(r);
    return 0;
}
