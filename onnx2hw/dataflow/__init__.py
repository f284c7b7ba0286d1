"""Dataflow: an :class:`~onnx2hw.layers.IntegerGraph` + a board budget -> a folded streaming
:class:`Pipeline` (one stage per layer, FIFO depths, cycle and resource estimates)."""
from .compile import check_supported, compile_pipeline
from .fold import MULS, Budget, Folding, auto_fold, fold_entry, load_folding, save_folding
from .pipeline import INPUT, OUTPUT, Block, Link, Pipeline, Stage

__all__ = ["compile_pipeline", "check_supported", "Budget", "Folding", "MULS", "auto_fold", "fold_entry", "load_folding",
           "save_folding", "Pipeline", "Stage", "Block", "Link", "INPUT", "OUTPUT"]
