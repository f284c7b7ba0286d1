"""Atomic outputs (onnx2hw.files) and build directories published only when complete
(onnx2hw.build_info's marker and hashes): a failed write leaves the destination as it was and
no temporary file; an interrupted or damaged build is refused by `run` and `open_build`."""
from __future__ import annotations

import errno
import json
import resource
import subprocess
import sys

import numpy as np
import pytest

import onnx2hw.build as build_mod
import onnx2hw.files as files
from _paths import EXAMPLES
from onnx2hw import ModelError, open_build
from onnx2hw.build_info import INCOMPLETE, read_build_info
from onnx2hw.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

MLP = str(EXAMPLES / "digits_mlp.onnx")
MLP_INT8 = str(EXAMPLES / "digits_mlp_int8.onnx")
CALIB = str(EXAMPLES / "digits_calib.npz")
TEST = str(EXAMPLES / "digits_test.npz")
ORIGINAL = b"the user's own file\n"


def _temps(d):
    return sorted(p.name for p in d.iterdir() if p.name.endswith(files.TEMP_SUFFIX))


def _error_line(err: str) -> str:
    """The one ``error:`` line of stderr (progress lines before it are allowed), its last line."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], err
    assert "Traceback" not in err
    return errors[0]


# ---------------------------------------------------------------------------- onnx2hw.files
@pytest.mark.parametrize("exc", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_failed_write_leaves_the_destination_and_no_temporary(tmp_path, exc):
    dest = tmp_path / "y.npz"
    dest.write_bytes(ORIGINAL)
    with pytest.raises(type(exc)):
        with files.atomic_write(dest) as f:
            f.write(b"x" * 100_000)   # half written ...
            raise exc                 # ... when the disk fills (or Ctrl-C)
    assert dest.read_bytes() == ORIGINAL and _temps(tmp_path) == []
    fresh = tmp_path / "new.npz"
    with pytest.raises(type(exc)):
        with files.atomic_write(fresh) as f:
            f.write(b"x")
            raise exc
    assert not fresh.exists() and _temps(tmp_path) == []


def test_failed_fsync_names_the_destination(tmp_path, monkeypatch):
    dest = tmp_path / "model.onnx"
    dest.write_bytes(ORIGINAL)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(OSError, match="left as it was") as e:
        files.write_bytes(dest, b"new contents")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(dest)
    assert dest.read_bytes() == ORIGINAL and _temps(tmp_path) == []


def test_writes_replace_whole_files_and_keep_permissions(tmp_path):
    dest = tmp_path / "out.json"
    files.write_json(dest, {"a": 1})
    assert json.loads(dest.read_text()) == {"a": 1}
    dest.chmod(0o640)
    files.write_text(dest, "two\n")
    assert dest.read_text() == "two\n" and dest.stat().st_mode & 0o777 == 0o640
    files.save_npz(tmp_path / "y", {"y": np.arange(3)})   # exactly the name given
    with np.load(tmp_path / "y") as f:
        assert f["y"].tolist() == [0, 1, 2]
    files.write_bytes("/dev/null", b"not replaced: written through")
    with pytest.raises(ValueError, match="is a directory"):
        files.write_bytes(tmp_path, b"")
    assert _temps(tmp_path) == []


_LIMITED = """
import resource, sys
import numpy as np
from onnx2hw.files import save_npz
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
try:
    save_npz(sys.argv[1], {"y": np.zeros(100_000, np.float32)})
except OSError as e:
    print(e.errno, e)
    sys.exit(3)
"""


def test_file_size_limit_leaves_the_destination(tmp_path):
    dest = tmp_path / "y.npz"
    dest.write_bytes(ORIGINAL)
    r = subprocess.run([sys.executable, "-c", _LIMITED, str(dest)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and r.stdout.startswith(f"{errno.EFBIG} "), (r.stdout, r.stderr)
    assert dest.read_bytes() == ORIGINAL and _temps(tmp_path) == []


def _limit_fsize():
    resource.setrlimit(resource.RLIMIT_FSIZE, (4000, 4000))


def test_quantize_under_a_file_size_limit_keeps_the_users_file(tmp_path):
    dest = tmp_path / "q.onnx"
    dest.write_bytes(ORIGINAL)
    r = subprocess.run([sys.executable, "-m", "onnx2hw.cli", "quantize", MLP, "--calib", CALIB, "-o", str(dest)],
                       capture_output=True, text=True, timeout=300, preexec_fn=_limit_fsize, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    line = _error_line(r.stderr.split("\r")[-1])
    assert "File too large" in line and "left as it was" in line
    assert dest.read_bytes() == ORIGINAL and _temps(tmp_path) == []


@pytest.mark.parametrize("verb", [
    ["run", "build/nowhere", "--port", "sim", "--inputs", TEST],
    ["quantize", MLP, "--calib", CALIB],
    ["sim", MLP_INT8, "--count", "1"],
])
def test_output_that_is_a_directory_is_refused(tmp_path, capsys, verb):
    out = tmp_path / "outdir"
    out.mkdir()
    assert main([*verb, "-o", str(out)]) == 2
    line = _error_line(capsys.readouterr().err)
    assert "is a directory" in line and str(out) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outdir"] and not any(out.iterdir())


# ---------------------------------------------------------------------------- build directories
class _FakeTools:
    """run_build without Yosys/nextpnr: a bitstream and a timing log, optionally a failure."""

    def __init__(self, bit=b"\xff" * 2000, fail=None):
        self.bit, self.fail = bit, fail

    def __call__(self, plan, build_dir, name, progress=None, timeout=3600, after_synthesis=None, **retry):
        build_dir.mkdir(parents=True, exist_ok=True)
        if self.fail is not None:
            raise self.fail
        (build_dir / f"{name}.tim").write_text(
            "Info: Device utilisation:\nInfo:            TRELLIS_COMB:  1234/ 83640     1%\n"
            "Info: Max frequency for clock '$glbnet$clk': 200.00 MHz (PASS at 75.00 MHz)\n")
        (build_dir / f"{name}.bit").write_bytes(self.bit)
        (build_dir / f"{name}.svf").write_bytes(b"svf")
        return {"synthesis (Yosys)": 0.1}


def _run_error(capsys, out) -> str:
    assert main(["run", str(out), "--port", "sim", "--inputs", TEST]) == 2
    return _error_line(capsys.readouterr().err)


def test_build_is_published_with_hashes_and_checked(tmp_path, monkeypatch, capsys):
    out = tmp_path / "b"
    monkeypatch.setattr(build_mod, "run_build", _FakeTools())
    assert main(["synth", MLP_INT8, "-o", str(out)]) == 0
    capsys.readouterr()
    info = read_build_info(out)
    rec = info["build"]
    assert rec["complete"] and rec["bitstream"] == "digits_mlp_int8.bit"
    assert set(rec["sha256"]) == {"digits_mlp_int8.bit", "digits_mlp_int8.svf", "digits_mlp_int8.v", "folding.json",
                                  "report.json", "report.html"}
    assert not (out / INCOMPLETE).exists() and _temps(out) == []
    assert open_build(out).bitstream == out / "digits_mlp_int8.bit"
    # a bitstream of another design beside this description
    (out / "digits_mlp_int8.bit").write_bytes(b"\x00" * 2000)
    for call in (read_build_info, open_build):
        with pytest.raises(ModelError, match="the bitstream digits_mlp_int8.bit does not belong to this build"):
            call(out)
    assert "does not belong to this build" in _run_error(capsys, out)
    # no bitstream at all
    (out / "digits_mlp_int8.bit").unlink()
    with pytest.raises(ModelError, match=r"is incomplete: digits_mlp_int8.bit is missing; run synth again"):
        open_build(out)
    assert "is incomplete: digits_mlp_int8.bit is missing" in _run_error(capsys, out)


@pytest.mark.parametrize("fail", [KeyboardInterrupt(), OSError(errno.ENOSPC, "No space left on device")])
def test_interrupted_rebuild_is_refused_and_a_rerun_succeeds(tmp_path, monkeypatch, capsys, fail):
    out = tmp_path / "b"
    monkeypatch.setattr(build_mod, "run_build", _FakeTools(bit=b"\x01" * 2000))
    assert main(["synth", MLP_INT8, "-o", str(out)]) == 0
    read_build_info(out)
    # the rebuild stops during the tools: the earlier build is no longer offered as this one
    monkeypatch.setattr(build_mod, "run_build", _FakeTools(fail=fail))
    rc = main(["synth", MLP_INT8, "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == (130 if isinstance(fail, KeyboardInterrupt) else 2)
    line = _error_line(err)
    if rc == 130:
        assert line.startswith("error: interrupted by SIGINT during building ") and "left incomplete" in line
    assert (out / INCOMPLETE).exists() and not (out / "digits_mlp_int8.bit").exists() and _temps(out) == []
    for call in (read_build_info, open_build):
        with pytest.raises(ModelError, match=r"b is incomplete: synth was interrupted \(or is still running\); "
                                             r"run synth again"):
            call(out)
    assert "is incomplete: synth was interrupted" in _run_error(capsys, out)
    monkeypatch.setattr(build_mod, "run_build", _FakeTools(bit=b"\x02" * 2000))
    assert main(["synth", MLP_INT8, "-o", str(out)]) == 0
    assert not (out / INCOMPLETE).exists()
    assert open_build(out).bitstream.read_bytes() == b"\x02" * 2000


def test_failed_write_during_build_leaves_it_incomplete(tmp_path, monkeypatch, capsys):
    out = tmp_path / "b"
    monkeypatch.setattr(build_mod, "run_build", _FakeTools())

    def full(src, dest):
        raise OSError(errno.ENOSPC, "No space left on device", str(dest))

    monkeypatch.setattr(build_mod, "copy_file", full)
    assert main(["synth", MLP_INT8, "-o", str(out)]) == 2
    assert "No space left on device" in _error_line(capsys.readouterr().err)
    with pytest.raises(ModelError, match="is incomplete"):
        read_build_info(out)

