"""The softmax family's use_length form (a second input, each row's length, masking the row past it) is not
described: it was refused as "got 2 inputs, the description takes 1..1"; now by what it is."""
import pytest

from tofu.errors import TDLError
from tofu.graph.attrs import Attrs
from tofu.tdl.describe import describe


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmin"])
def test_a_softmax_masked_by_lengths_is_refused_by_name(op):
    """MXNet's use_length form (a second input, the length of each row) was refused as 'got 2 inputs'."""
    with pytest.raises(TDLError, match=f"{op}: a length input \\(use_length=True"):
        describe(op, Attrs.parse({"use_length": "True"}), ((4, 6), (4,)), ((4, 6),))
