"""Place and route again with another seed when the clock is missed by a little
(synth.run_build's retry_seeds), with stand-in tools: which run is kept, which files stay, what
the report says."""
from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from onnx2hw import synth
from onnx2hw.build import retry_seeds
from onnx2hw.report import pnr_runs_text

NAME = "top"
SCRIPT = f'''#!/bin/sh
"$YOSYS" -q -l {NAME}.rpt {NAME}.ys
"$NEXTPNR_ECP5" --quiet --timing-allow-fail --log {NAME}.tim --85k --json {NAME}.json --textcfg {NAME}.config
"$ECPPACK" --compress --input {NAME}.config --bit {NAME}.bit
'''

#: stand-in nextpnr: Fmax per seed from $FAKE_FMAX ("default=93.2,2=112.2"), target 100 MHz;
#: the configuration names its seed; every call is logged to calls.txt
FAKE_PNR = r'''
import os, sys
a = sys.argv[1:]
seed = a[a.index("--seed") + 1] if "--seed" in a else "default"
fmax = dict(kv.split("=") for kv in os.environ["FAKE_FMAX"].split(","))[seed]
ok = "PASS" if float(fmax) >= 100 else "FAIL"
open(a[a.index("--log") + 1], "w").write(f"Info: Max frequency for clock 'clk': {fmax} MHz ({ok} at 100.00 MHz)\n")
open(a[a.index("--textcfg") + 1], "w").write(f"seed {seed}\n")
open("calls.txt", "a").write(" ".join(a) + "\n")
'''
#: stand-in ecppack: the bitstream is the configuration it packed
FAKE_PACK = r'''
import sys
a = sys.argv[1:]
open(a[a.index("--bit") + 1], "w").write(open(a[a.index("--input") + 1]).read())
'''


class _Plan:
    def __init__(self, script=SCRIPT):
        self.files = {f"build_{NAME}.sh": script}

    def extract(self, d):
        Path(d).mkdir(parents=True, exist_ok=True)


def _exe(path: Path, body: str) -> str:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def tools(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = {"YOSYS": _exe(bin_dir / "yosys", "pass\n"), "NEXTPNR_ECP5": _exe(bin_dir / "pnr", FAKE_PNR),
            "ECPPACK": _exe(bin_dir / "pack", FAKE_PACK)}
    monkeypatch.setattr(synth, "tool_env", lambda: fake)

    def run(fmax: str, seeds=(2, 3), script=SCRIPT):
        monkeypatch.setenv("FAKE_FMAX", fmax)
        work, runs, shown = tmp_path / "work", [], []
        synth.run_build(_Plan(script), work, NAME, progress=shown.append, retry_seeds=seeds, attempts=runs)
        return work, runs, shown
    return run


def _calls(work):
    return [ln.split("--seed ")[1].split()[0] if "--seed" in ln else "default"
            for ln in (work / "calls.txt").read_text().splitlines()]


def test_a_near_miss_is_placed_again_and_the_first_run_that_meets_is_kept(tools):
    work, runs, shown = tools("default=93.2,2=112.2,3=120")
    assert _calls(work) == ["default", "2"]                      # stops at the first that meets
    assert runs == [{"seed": None, "fmax_mhz": 93.2, "kept": False}, {"seed": 2, "fmax_mhz": 112.2, "kept": True}]
    assert (work / f"{NAME}.bit").read_text() == "seed 2\n"      # packed from the kept run
    assert "112.2 MHz (PASS" in (work / f"{NAME}.tim").read_text()
    assert (work / f"{NAME}.seed-default.tim").is_file() and (work / f"{NAME}.seed-default.config").is_file()
    assert "place and route (nextpnr-ecp5) again with seed 2 (93.2 MHz < 100.0 MHz)" in shown
    assert pnr_runs_text(runs) == "place and route ran 2 times: nextpnr's seed 93.2 MHz, seed 2 112.2 MHz (kept)"


def test_when_every_run_misses_the_fastest_is_kept(tools):
    work, runs, _ = tools("default=95,2=97.5,3=91")
    assert _calls(work) == ["default", "2", "3"]
    assert [r["kept"] for r in runs] == [False, True, False]
    assert (work / f"{NAME}.config").read_text() == "seed 2\n" == (work / f"{NAME}.bit").read_text()
    assert "97.5 MHz (FAIL" in (work / f"{NAME}.tim").read_text()
    for seed in ("default", "2", "3"):                            # every run's files stay
        assert (work / f"{NAME}.seed-{seed}.tim").is_file(), seed


@pytest.mark.parametrize("fmax", ["default=101", "default=84.9"])
def test_a_met_clock_or_a_far_miss_is_placed_once(tools, fmax):
    work, runs, _ = tools(fmax)
    assert _calls(work) == ["default"] and len(runs) == 1 and runs[0]["kept"]
    assert not list(work.glob("*.seed-*")) and pnr_runs_text(runs) == ""


def test_no_retry_seeds_no_retry(tools):
    work, runs, _ = tools("default=99", seeds=())
    assert _calls(work) == ["default"] and runs == [{"seed": None, "fmax_mhz": 99.0, "kept": True}]


def test_an_earlier_builds_runs_are_cleared(tools):
    work, _, _ = tools("default=95,2=96,3=97")
    assert len(list(work.glob(f"{NAME}.seed-*.tim"))) == 2          # the last run is under the plan's names
    work, _, _ = tools("default=101")
    assert not list(work.glob("*.seed-*")) and not list(work.glob("nextpnr-seed-*"))


def test_a_given_seed_is_replaced_not_repeated(tools):
    work, runs, _ = tools("5=95,6=101", seeds=(6,), script=SCRIPT.replace("--quiet", "--quiet --seed 5"))
    assert _calls(work) == ["5", "6"] and [(r["seed"], r["kept"]) for r in runs] == [(5, False), (6, True)]
    assert all(ln.count("--seed") == 1 for ln in (work / "calls.txt").read_text().splitlines())


def test_retry_seeds():
    assert retry_seeds(None, 3) == [2, 3] and retry_seeds(7, 2) == [8] and retry_seeds(5, 1) == []
    assert retry_seeds(2 ** 31 - 1, 3) == []
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="place-and-route tries"):
            retry_seeds(None, bad)


def test_runs_in_words():
    runs = [{"seed": None, "fmax_mhz": 93.2, "kept": False}, {"seed": 2, "fmax_mhz": None, "kept": False},
            {"seed": 3, "fmax_mhz": 104.0, "kept": True}]
    assert pnr_runs_text(runs) == ("place and route ran 3 times: nextpnr's seed 93.2 MHz, seed 2 no timing report, "
                                   "seed 3 104.0 MHz (kept)")
