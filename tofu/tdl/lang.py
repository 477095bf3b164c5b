"""The TDL language in one import: every name an operator description uses.

A description file (``operators_tdl/<family>.py``) starts with::

    from tofu.tdl.lang import *

and has the decorators and Cases (``tdl_op``, ``tdl_expansion``, ``Case``, ``NoAttrs``), the error it raises
(``TDLError``), the syntax (``TensorVar``, ``Var``, ``ValueExpr``, ``IndexExpr``, ``Computed``), reductions
(``Sum``, ``Max``, ``Min``, ``Prod``), ``compute``, ``nary``, ``Opaque``, ``IndexValue``, ``uses``, ``where``,
the comparisons, the math functions (``exp`` ... ``abs_``, ``round_``), ``NEG_INF``, and the standard names a
description's signature and attributes need (``dataclass``, ``Callable``, ``Sequence``). Nothing else is
exported: helpers of another family are imported from that family's module by name.
"""
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tofu.errors import TDLError
from tofu.tdl.describe import Case, NoAttrs, tdl_expansion, tdl_op
from tofu.tdl.expr import (NEG_INF, Computed, IndexExpr, IndexValue, Max, Min, Opaque, Prod, Sum, TensorVar,
                           ValueExpr, Var, abs_, arccos, arcsin, arctan, ceil, compute, cos, eq, erf, erfinv, exp,
                           expm1, floor, gamma, gammaln, ge, gt, le, log, log1p, lt, maximum, minimum, nary, ne,
                           reciprocal, relu, rint, round_, rsqrt, sigmoid, sign, sin, softrelu, sqrt, square, tanh,
                           trunc, uses, where)

__all__ = [
    # declaring an operator
    "tdl_op", "tdl_expansion", "Case", "NoAttrs", "TDLError",
    # the syntax
    "TensorVar", "Var", "ValueExpr", "IndexExpr", "Computed", "IndexValue", "Opaque",
    "compute", "nary", "uses", "where",
    "Sum", "Max", "Min", "Prod",
    "gt", "ge", "lt", "le", "eq", "ne",
    "maximum", "minimum",
    "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "softrelu", "abs_", "square", "log1p", "expm1",
    "sin", "cos", "sign", "erf", "reciprocal", "arcsin", "arccos", "arctan", "floor", "ceil", "trunc", "round_",
    "rint", "gamma", "gammaln", "erfinv",
    "NEG_INF",
    # what a description's attributes and signatures use
    "dataclass", "Callable", "Sequence",
]
