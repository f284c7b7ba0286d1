"""The hardware-support table (inspect's column, the compile-time check) lists exactly the ops
the importers and the float quantizer handle."""
from onnx2hw.dataflow.support import HW_SUPPORT, hw_support
from onnx2hw.quant import _canonical, import_qdq, import_qonnx, import_qop


def test_support_table_matches_what_the_importers_handle():
    handled = set(import_qdq.HANDLERS) | set(import_qop.HANDLERS) | set(import_qonnx.HANDLERS)
    handled |= {("", op) for op in _canonical.SUPPORTED}
    assert set(HW_SUPPORT) == handled, (sorted(handled - set(HW_SUPPORT)), sorted(set(HW_SUPPORT) - handled))


def test_unknown_op_has_no_mapping():
    assert hw_support("", "Softmax") is None and hw_support("", "Gemm")
