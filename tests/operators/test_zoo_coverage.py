"""Every operator in the training graphs of every zoo model has a TDL description that instantiates at the
node's shapes and yields at least one partition strategy."""
import pytest

from tofu import registry
from tofu.analysis.strategies import strategies
from tofu.api import load_graph
from tofu.models import model_names
from tofu.tdl.describe import describe


@pytest.mark.parametrize("name", model_names())
def test_every_zoo_op_is_described(name):
    graph = load_graph(name)
    known = registry.load_builtin_operators()
    missing = sorted({n.op for n in graph.nodes} - set(known))
    assert not missing, f"{name}: no description for {missing}"
    seen = set()
    for node in graph.nodes:
        key = (node.op, node.attrs, tuple(graph.tensors[t].shape for t in node.inputs))
        if key in seen:
            continue
        seen.add(key)
        desc = describe(node.op, node.attrs, [graph.tensors[t].shape for t in node.inputs],
                        [graph.tensors[t].shape for t in node.outputs], node=node.name)
        assert strategies(desc, 2), f"{node.name} ({node.op}) has no 2-way strategy"
