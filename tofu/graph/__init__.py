"""Stage 1 of the pipeline: MXNet graphs into the project's IR (see ``ir.py``)."""
from tofu.graph.attrs import Attrs, parse_value
from tofu.graph.ir import Graph, Node, Role, Shape, TensorEntry
from tofu.graph.mxnet_import import import_symbol, load_symbol_file, parse_shape

__all__ = ["Attrs", "Graph", "Node", "Role", "Shape", "TensorEntry", "import_symbol", "load_symbol_file",
           "parse_shape", "parse_value"]
