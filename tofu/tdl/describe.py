"""Operator descriptions: registering a TDL description and instantiating it for concrete shapes.

Input: an MXNet op name, its parsed :class:`~tofu.graph.attrs.Attrs`, input and output shapes.
Output: an :class:`OpDescription` (typed attributes, input tensors, one lambda body per output).

A description is one decorated function in ``operators_tdl/``::

    @tdl_op("FullyConnected", inputs=("data", "weight", "bias?"), attrs=FCAttrs, cases=[...])
    def fully_connected(data, weight, bias, attrs):
        '''out[b, h] = sum_k data[b, k] * weight[h, k] + bias[h]'''
        return lambda b, h: Sum(lambda k: data[b, k] * weight[h, k]) + (bias[h] if bias else 0.0)

Input names ending in ``?`` are optional (absent ones arrive as None), a single ``*name`` takes any number
of inputs (as a tuple). The function returns one lambda, or a tuple with one lambda per output. A builder
that declares a keyword parameter ``out_shapes`` receives the output shapes (from MXNet's shape inference),
for operators such as Reshape whose semantics depends on them.

:func:`index_ranges` reads an instantiated description for the inputs it reads as integer indices or lengths
(and their valid ranges), which the run time uses to draw and check such inputs.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from tofu import registry
from tofu.errors import TDLError, TofuError
from tofu.graph.attrs import Attrs, AttrValue
from tofu.tdl.expr import Access, Computed, TensorVar, ValueExpr, Var, call_lambda, children, lambda_vars

Shape = tuple[int, ...]


@dataclass(frozen=True)
class NoAttrs:
    """Attributes of an operator whose semantics takes none."""


@dataclass(frozen=True)
class Case:
    """One example setting of an operator, used by the generic tests (conformance with MXNet, strategies).

    Attributes:
        shapes: one shape per input, in input order.
        attrs: MXNet attribute values as Python values.
        ints: ``(input position, n)``: that input holds integers drawn from [0, n) (indices, labels).
        negative: positions of ``ints`` inputs drawn from [-n, n) instead: negative indices, for operators
            that count them from the end (gather_nd).
        unique: positions of ``ints`` inputs whose values are all distinct (drawn without replacement), for
            operators that write at the indices (a repeated index makes the result depend on the write order).
        positive: positions of inputs drawn from [0.5, 2) (variances, arguments of log or sqrt).
        uniform: ``(input position, low, high)``: that input is drawn uniformly from [low, high) (arguments of
            arcsin or arccosh, fractional sequence lengths or indices).
        spd: positions of inputs drawn as symmetric positive-definite matrices over their last two axes,
            M M^T / n + I with M normal (what a Cholesky factorization or an inverse needs).
        train: run MXNet's operator in training mode (BatchNorm's batch statistics).
        int32: positions of ``ints`` inputs MXNet's kernel takes as int32 only (softmax's lengths); the others
            are float32, as a graph's inputs are by default.

    Raises:
        TDLError: ``negative``, ``unique`` or ``int32`` names an input that ``ints`` does not, or a ``unique``
            input has more elements than its range has integers.
    """

    shapes: tuple[Shape, ...]
    attrs: Mapping[str, AttrValue] = field(default_factory=dict)
    ints: tuple[tuple[int, int], ...] = ()
    negative: tuple[int, ...] = ()
    unique: tuple[int, ...] = ()
    positive: tuple[int, ...] = ()
    uniform: tuple[tuple[int, float, float], ...] = ()
    spd: tuple[int, ...] = ()
    train: bool = False
    int32: tuple[int, ...] = ()

    def __post_init__(self):
        ints = dict(self.ints)
        for name, positions in (("negative", self.negative), ("unique", self.unique), ("int32", self.int32)):
            for i in positions:
                if i not in ints:
                    raise TDLError(f"Case {self}: {name} input {i} is not drawn as integers (add ({i}, n) to ints)")
        for i in self.spd:
            if len(self.shapes[i]) < 2 or self.shapes[i][-1] != self.shapes[i][-2]:
                raise TDLError(f"Case {self}: spd input {i} of shape {self.shapes[i]} is not a stack of square "
                               f"matrices")
        for i in self.unique:
            size, count = math.prod(self.shapes[i]), ints[i] * (2 if i in self.negative else 1)
            if size > count:
                raise TDLError(f"Case {self}: unique input {i} has {size} elements but only {count} distinct "
                               f"integers to draw from")

    def int_range(self, i: int) -> tuple[int, int] | None:
        """``[low, high)`` of the integers input ``i`` is drawn from, None if it is not drawn as integers."""
        n = dict(self.ints).get(i)
        if n is None:
            return None
        return (-n, n) if i in self.negative else (0, n)

    def parsed_attrs(self) -> Attrs:
        return Attrs.of(**self.attrs)

    def __str__(self) -> str:
        a = ",".join(f"{k}={v}" for k, v in sorted(self.attrs.items()))
        return "x".join("-".join(map(str, s)) for s in self.shapes) + (f"[{a}]" if a else "")


@dataclass(frozen=True)
class OpSpec:
    """A registered description: how to build an :class:`OpDescription` for one MXNet operator."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs_type: type
    builder: Callable = field(compare=False)
    cases: tuple[Case, ...]
    source: str                 # "operators_tdl/conv.py:convolution", for error messages

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.builder) or ""

    def input_names(self, n: int) -> tuple[str, ...]:
        """Names of the first ``n`` inputs (a variadic input expands to name0, name1, ...)."""
        if self.inputs and self.inputs[0].startswith("*"):
            return tuple(f"{self.inputs[0][1:]}{i}" for i in range(n))
        return tuple(x.rstrip("?") for x in self.inputs[:n])

    def check_arity(self, n: int) -> None:
        if self.inputs and self.inputs[0].startswith("*"):
            if n < 1:
                raise TDLError(f"{self.op}: needs at least one input")
            return
        required = sum(1 for x in self.inputs if not x.endswith("?"))
        if not required <= n <= len(self.inputs):
            raise TDLError(f"{self.op}: got {n} inputs, the description ({self.source}) takes "
                           f"{required}..{len(self.inputs)}: {', '.join(self.inputs)}")


@dataclass(frozen=True)
class OutputDef:
    name: str
    shape: Shape
    vars: tuple[Var, ...]
    body: ValueExpr


@dataclass(frozen=True)
class OpDescription:
    """An operator instantiated for concrete shapes: what partition analysis and the interpreter read."""

    op: str
    attrs: object
    inputs: tuple[TensorVar, ...]
    outputs: tuple[OutputDef, ...]
    source: str = ""


@dataclass(frozen=True)
class IndexRange:
    """The integers an operator reads an input as: indices or lengths in ``[low, high]``, both included."""

    low: int
    high: int
    reason: str          # "an index into dimension 0 of 'weight' (extent 7)", ...

    def __str__(self) -> str:
        return f"[{self.low}, {self.high}]"


def index_ranges(desc: OpDescription) -> dict[int, IndexRange]:
    """Per input position, the integers the operator reads that input as, derived from the description:

    * an input read on its own as a data-dependent subscript (``weight[data[b, t], e]``) is an index into the
      dimension it subscripts, of extent n: ``[0, n - 1]``;
    * an access declared with ``valid=(low, high)`` (``lengths.at(b, valid=(1, T))``, a wrapped index of
      gather_nd) holds ``[low, high]``.

    Several constraints on one input intersect. Inputs read as plain values are absent.

    Raises:
        TDLError: the constraints on one input do not intersect (a malformed description).
    """
    return dict(_index_ranges(desc))


@lru_cache(maxsize=1024)
def _index_ranges(desc: OpDescription) -> tuple[tuple[int, IndexRange], ...]:
    position = {id(t): i for i, t in enumerate(desc.inputs)}
    found: dict[int, IndexRange] = {}

    def add(tensor, low: int, high: int, reason: str) -> None:
        i = position.get(id(tensor))
        if i is None:
            return
        r = found.get(i)
        if r is None:
            found[i] = IndexRange(low, high, reason)
            return
        lo, hi = max(low, r.low), min(high, r.high)
        if lo > hi:
            raise TDLError(f"{desc.op} in {desc.source}: input '{tensor.name}' is read as {r.reason} and as "
                           f"{reason}: no integer is both")
        if (lo, hi) != (r.low, r.high):
            found[i] = IndexRange(lo, hi, reason if (lo, hi) == (low, high) else f"{r.reason}; {reason}")

    stack: list[ValueExpr] = [o.body for o in desc.outputs]
    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if isinstance(e, Access):
            if e.valid is not None:
                add(e.tensor, *e.valid, "an index or a length (its description's valid=)")
            for d, sub in enumerate(e.index):
                if isinstance(sub, Access) and sub.valid is None and not sub.sliced:
                    n = e.tensor.shape[d]
                    add(sub.tensor, 0, n - 1, f"an index into dimension {d} of '{e.tensor.name}' (extent {n})")
            if isinstance(e.tensor, Computed) and id(e.tensor) not in seen:
                seen.add(id(e.tensor))
                stack.append(e.tensor.body)
        stack.extend(children(e))
    return tuple(sorted(found.items()))


def tdl_op(op: str, *, inputs: Sequence[str], outputs: Sequence[str] = ("output",),
           attrs: type = NoAttrs, cases: Sequence[Case] = (), aliases: Sequence[str] = ()) -> Callable:
    """Registers the decorated function as the TDL description of MXNet operator ``op`` (and ``aliases``).

    Raises:
        DuplicateRegistrationError: ``op`` already has a description.
        TDLError: the declaration itself is malformed.
    """
    def decorate(fn: Callable) -> Callable:
        source = f"{_relative(inspect.getsourcefile(fn))}:{fn.__name__}"
        if not dataclasses.is_dataclass(attrs):
            raise TDLError(f"{op} ({source}): attrs must be a frozen dataclass, got {attrs!r}")
        if any(x.startswith("*") for x in inputs) and len(inputs) != 1:
            raise TDLError(f"{op} ({source}): a variadic '*name' input must be the only input")
        specs = [OpSpec(name, tuple(inputs), tuple(outputs), attrs, fn, tuple(cases), source)
                 for name in (op, *aliases)]
        for spec in specs:                  # all names are checked before any is registered
            registry.check_unregistered(spec.op, spec.source)
        for spec in specs:
            registry.register(spec.op, spec)
        return fn
    return decorate


def _relative(path: str | None) -> str:
    if not path:
        return "?"
    p = Path(path)
    return "/".join(p.parts[-2:])


def typed_attrs(cls: type, attrs: Attrs, op: str) -> object:
    """Builds the operator's attribute dataclass from parsed attributes (coercing ints, tuples, floats).

    Attributes the dataclass does not declare are ignored (they do not change semantics: workspace,
    cudnn_tune, ...). A declared field without default that the node lacks is an error.
    """
    hints = _type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in attrs:
            values[f.name] = _coerce(attrs[f.name], hints[f.name], op, f.name)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise TDLError(f"{op}: attribute '{f.name}' is required")
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        raise TDLError(f"{op}: bad attributes {dict(attrs)}: {e}") from None


@lru_cache(maxsize=None)
def _type_hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _coerce(v: AttrValue, hint, op: str, name: str):
    origin = typing.get_origin(hint)
    options = typing.get_args(hint) if origin in (typing.Union, getattr(__import__("types"), "UnionType")) else (hint,)
    if v is None and type(None) in options:
        return None
    for t in options:
        o = typing.get_origin(t) or t
        if o is tuple:
            if isinstance(v, tuple):
                return v
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return (v,)
        elif o is bool and isinstance(v, (bool, int)):
            return bool(v)
        elif o is int and isinstance(v, int) and not isinstance(v, bool):
            return v
        elif o is float and isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        elif o is str:
            return v if isinstance(v, str) else str(v)
    raise TDLError(f"{op}: attribute '{name}' = {v!r} is not a {hint}")


def describe(op: str, attrs: Attrs, input_shapes: Sequence[Shape], output_shapes: Sequence[Shape],
             node: str | None = None) -> OpDescription:
    """Instantiates the description of ``op`` for concrete attributes and shapes (cached: descriptions are
    immutable values, so equal requests share one, and with it the analysis cached per description).

    Args:
        op: MXNet operator name.
        attrs: the node's parsed attributes.
        input_shapes: shape of each input, in the operator's argument order.
        output_shapes: shape of each visible output (a prefix of the described outputs).
        node: the graph node's name, for error messages.

    Raises:
        UnsupportedOperatorError: no description for ``op``.
        TDLError: the description is malformed for these shapes; the message names op and source.
    """
    registry.lookup(op, node=node)      # an unknown op names its node
    if type(input_shapes) is tuple and type(output_shapes) is tuple and \
            all(type(s) is tuple for s in input_shapes + output_shapes):
        key = (op, attrs, input_shapes, output_shapes)      # the search's views: already tuples (of ints)
    else:
        key = (op, attrs, tuple(tuple(int(d) for d in s) for s in input_shapes),
               tuple(tuple(int(d) for d in s) for s in output_shapes))
    try:
        return _describe(*key)
    except TDLError as e:
        if node is None:
            raise
        message = str(e)
        raise TDLError(message.replace(f"{op} in ", f"{op} (node {node!r}) in ", 1)) from e.__cause__


@lru_cache(maxsize=8192)
def _describe(op: str, attrs: Attrs, input_shapes: tuple, output_shapes: tuple, node: str | None = None):
    spec = registry.lookup(op, node=node)
    where = f"{op}{f' (node {node!r})' if node else ''} in {spec.source}"
    try:
        spec.check_arity(len(input_shapes))
        typed = typed_attrs(spec.attrs_type, attrs, op)
        tensors = tuple(TensorVar(n, tuple(int(d) for d in s))
                        for n, s in zip(spec.input_names(len(input_shapes)), input_shapes))
        extra = ({"out_shapes": tuple(tuple(s) for s in output_shapes)}
                 if "out_shapes" in inspect.signature(spec.builder).parameters else {})
        if spec.inputs and spec.inputs[0].startswith("*"):
            result = spec.builder(tensors, typed, **extra)
        else:
            padded = tensors + (None,) * (len(spec.inputs) - len(tensors))
            result = spec.builder(*padded, typed, **extra)
        lambdas = result if isinstance(result, tuple) else (result,)
        if len(lambdas) < len(output_shapes):
            raise TDLError(f"the description returns {len(lambdas)} output lambdas, the node has "
                           f"{len(output_shapes)} outputs")
        names = spec.outputs if len(spec.outputs) >= len(lambdas) else tuple(f"output{i}" for i in range(len(lambdas)))
        outputs = []
        for name, fn, shape in zip(names, lambdas, output_shapes):
            vars_ = lambda_vars(fn, len(shape), f"output '{name}'")
            outputs.append(OutputDef(name, tuple(int(d) for d in shape), vars_, call_lambda(fn, vars_)))
    except TDLError as e:
        message = str(e)
        message = message[len(op) + 2:] if message.startswith(f"{op}: ") else message
        raise TDLError(f"{where}: {message}") from None
    except TofuError:
        raise
    except Exception as e:   # a bug in the description itself: name it, keep the cause
        raise TDLError(f"{where}: description failed: {type(e).__name__}: {e}") from e
    return OpDescription(op, typed, tensors, tuple(outputs), spec.source)


def tdl_expansion(op: str, refuses: Callable | None = None, partials: bool = False) -> Callable:
    """Declares how to run ``op`` with MXNet's simpler operators when a strategy exchanges partial statistics
    (nested reductions, e.g. BatchNorm split on the batch), which MXNet's fused kernel cannot do on a shard.

    The decorated function takes ``(pieces, shapes, attrs, allreduce)``: per worker its input symbols and
    their shapes, the op's typed attributes, and ``allreduce(partials, reducer="sum") -> combined`` (one symbol
    per worker each way; ``reducer`` is "sum" or "max"; the caller places the reduction); a function that also
    declares a keyword parameter ``origins`` receives per worker where each input piece starts in the whole
    input (an index tuple per input). It returns per worker the list of output symbols. Which statistics carry a
    gradient, all-reduced again in the backward pass, is read off the symbol it builds
    (``tofu.graph.gradients.statistics_gradients``): one computed under BlockGrad carries none.

    Args:
        op: the MXNet operator.
        refuses: ``(attrs, input_shapes) -> reason or None``: the attributes and shapes the expansion cannot
            run (their strategies that exchange statistics stay unrunnable).
        partials: it also runs a split of a reduction whose shards MXNet's kernel cannot run (Embedding split
            along its table's rows: the kernel clips an index its piece lacks, where the partial needs a zero
            row): each worker's partial output from its pieces and ``origins`` (which it must then declare).
    """
    def decorate(fn: Callable) -> Callable:
        expansion = registry.Expansion(fn, refuses, partials, op)
        if partials and not expansion.reads_origins:
            raise TDLError(f"{op}: an expansion with partials=True needs the origins of the pieces (declare a "
                           f"keyword parameter 'origins')")
        registry.register_expansion(op, expansion)
        return fn
    return decorate
