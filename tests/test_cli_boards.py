"""`onnx2hw boards`: the listing agrees with the registry."""
import json

from onnx2hw.boards import BOARDS
from onnx2hw.cli import main


def test_boards_json(capsys):
    assert main(["boards", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(BOARDS)
    by = {r["name"]: r for r in rows}
    assert (by["ulx3s-85f"]["lut"], by["ulx3s-85f"]["dsp"], by["ulx3s-85f"]["ebr"]) == (83640, 156, 208)
    assert by["ulx3s-85f"]["alias"] == "ulx3s"
    assert (by["icebreaker"]["device"], by["icebreaker"]["osc_mhz"], by["icebreaker"]["max_baud"]) == \
        ("iCE40UP5K", 12.0, 3e6)
    assert by["orangecrab"]["nextpnr"] == "--25k --package CSFBGA285"


def test_boards_table(capsys):
    assert main(["boards"]) == 0
    out = capsys.readouterr().out
    for name in BOARDS:
        assert name in out
    assert "83,640" in out and "5,280" in out
