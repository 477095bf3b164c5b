"""Errors of the operator registry and of instantiating a description (tofu.registry, tofu.tdl.describe).

Every error names what the user must fix: both sources of a duplicate, the unknown op and where to add it,
the op and the description's file:function for a malformed description. Tests register their own ops under
names starting with ``_tofu_test``; the ``scratch`` fixture removes every registration a test adds.
"""
from dataclasses import dataclass

import pytest

from tofu import registry
from tofu.errors import DuplicateRegistrationError, TDLError, TofuError, UnsupportedOperatorError
from tofu.graph.attrs import Attrs
from tofu.tdl.describe import Case, describe, tdl_op

HERE = "tdl/test_registry_errors.py"      # how sources are named: the file's directory and name


@pytest.fixture(autouse=True)
def scratch():
    """Leaves REGISTRY as it found it. The builtins are loaded first: a lookup in a test would import them
    otherwise, the cleanup would remove them, and their already-imported modules would never register again."""
    registry.load_builtin_operators()
    before = dict(registry.REGISTRY)
    yield
    for name in set(registry.REGISTRY) - set(before):
        del registry.REGISTRY[name]
    assert registry.REGISTRY == before


CASES = [Case(shapes=((2, 3),)), Case(shapes=((4,),))]


@dataclass(frozen=True)
class ScaleAttrs:
    factor: float
    offset: float = 0.0


def register_scale(name="_tofu_test_scale"):
    @tdl_op(name, inputs=("data",), attrs=ScaleAttrs, cases=CASES)
    def scale(data, attrs: ScaleAttrs):
        """out[i] = data[i] * factor + offset."""
        return lambda *i: data[i] * attrs.factor + attrs.offset
    return scale


# --------------------------------------------------------------------------------------------- registry

def test_duplicate_registration_names_both_sources():
    @tdl_op("_tofu_test_dup", inputs=("data",), cases=CASES)
    def first_description(data, attrs):
        return lambda *i: data[i]

    with pytest.raises(DuplicateRegistrationError) as err:
        @tdl_op("_tofu_test_dup", inputs=("data",), cases=CASES)
        def second_description(data, attrs):
            return lambda *i: -data[i]

    assert isinstance(err.value, TDLError)
    assert (f"operator '_tofu_test_dup' is described twice: in {HERE}:first_description and in "
            f"{HERE}:second_description") in str(err.value)
    assert registry.REGISTRY["_tofu_test_dup"].builder is first_description      # not overwritten


def test_duplicate_of_a_builtin_names_its_file():
    with pytest.raises(DuplicateRegistrationError,
                       match=f"'Convolution' is described twice: in operators_tdl/conv.py:convolution and in "
                             f"{HERE}:my_convolution"):
        @tdl_op("Convolution", inputs=("data", "weight"))
        def my_convolution(data, weight, attrs):
            return lambda *i: data[i]


def test_aliases_register_the_same_description():
    @tdl_op("_tofu_test_identity", inputs=("data",), cases=CASES, aliases=("_tofu_test_identity_alias",))
    def identity(data, attrs):
        return lambda *i: data[i]

    a, b = registry.REGISTRY["_tofu_test_identity"], registry.REGISTRY["_tofu_test_identity_alias"]
    assert a.builder is b.builder is identity and b.op == "_tofu_test_identity_alias"
    with pytest.raises(DuplicateRegistrationError, match="'_tofu_test_identity_alias' is described twice"):
        tdl_op("_tofu_test_other", inputs=("data",), aliases=("_tofu_test_identity_alias",))(identity)


def test_failed_registration_registers_nothing():
    with pytest.raises(DuplicateRegistrationError):
        @tdl_op("_tofu_test_half", inputs=("data",), aliases=("Convolution",))
        def half(data, attrs):
            return lambda *i: data[i]
    assert "_tofu_test_half" not in registry.REGISTRY


def test_unknown_operator_says_where_to_add_it():
    with pytest.raises(UnsupportedOperatorError) as err:
        describe("_tofu_test_missing", Attrs.of(), [(2,)], [(2,)])
    assert err.value.op == "_tofu_test_missing"
    assert not isinstance(err.value, TDLError) and isinstance(err.value, TofuError)
    msg = str(err.value)
    assert "operator '_tofu_test_missing' has no TDL description" in msg
    assert "add one under operators_tdl/" in msg
    assert "Convolution" in msg                        # lists (some of) what is described


def test_unknown_operator_names_the_node():
    with pytest.raises(UnsupportedOperatorError, match="operator '_tofu_test_missing' \\(node 'layer3'\\)"):
        registry.lookup("_tofu_test_missing", node="layer3")


def test_bad_declarations_name_op_and_source():
    class NotADataclass:
        pass

    with pytest.raises(TDLError, match=f"_tofu_test_bad \\({HERE}:bad\\): attrs must be a frozen dataclass"):
        @tdl_op("_tofu_test_bad", inputs=("data",), attrs=NotADataclass)
        def bad(data, attrs):
            return lambda *i: data[i]

    with pytest.raises(TDLError, match=f"_tofu_test_bad \\({HERE}:bad\\): a variadic '\\*name' input must be the "
                                       "only input"):
        @tdl_op("_tofu_test_bad", inputs=("*xs", "y"))
        def bad(xs, y, attrs):  # noqa: F811 (the first one never registered)
            return lambda *i: y[i]

    assert "_tofu_test_bad" not in registry.REGISTRY


# ------------------------------------------------------------------------------------------ describe

def test_typed_attributes_coerce_default_and_ignore_undeclared():
    register_scale()
    desc = describe("_tofu_test_scale", Attrs.of(factor=2, workspace=512, cudnn_tune="off"), [(2, 3)], [(2, 3)])
    assert desc.attrs == ScaleAttrs(factor=2.0, offset=0.0)
    assert isinstance(desc.attrs.factor, float)
    assert desc.source == f"{HERE}:scale"


@pytest.mark.parametrize("shapes", [[], [(2,), (2,)]], ids=["too-few", "too-many"])
def test_wrong_arity_names_op_and_source(shapes):
    register_scale()
    with pytest.raises(TDLError) as err:
        describe("_tofu_test_scale", Attrs.of(factor=2.0), shapes, [(2,)])
    msg = str(err.value)
    assert msg.startswith("_tofu_test_scale")
    assert f"got {len(shapes)} inputs, the description ({HERE}:scale) takes 1..1: data" in msg


def test_missing_or_bad_attribute_names_op_and_attribute():
    register_scale()
    with pytest.raises(TDLError, match=r"_tofu_test_scale in \S+:scale: attribute 'factor' is required"):
        describe("_tofu_test_scale", Attrs.of(offset=1.0), [(2,)], [(2,)])
    with pytest.raises(TDLError, match=r"_tofu_test_scale in \S+:scale: attribute 'factor' = 'big' is not a "):
        describe("_tofu_test_scale", Attrs.of(factor="big"), [(2,)], [(2,)])


@pytest.mark.parametrize("attrs", [Attrs.of(offset=1.0), Attrs.of(factor="big"), Attrs.of(factor=-1.0)],
                         ids=["missing", "bad-type", "raised-by-description"])
def test_every_describe_error_names_source_and_node(attrs):
    @tdl_op("_tofu_test_checked", inputs=("data",), attrs=ScaleAttrs, cases=CASES)
    def checked(data, attrs: ScaleAttrs):
        if attrs.factor < 0:
            raise TDLError("_tofu_test_checked: a negative factor is not described")
        return lambda *i: data[i] * attrs.factor

    with pytest.raises(TDLError) as err:
        describe("_tofu_test_checked", attrs, [(2,)], [(2,)], node="scale0")
    assert f"{HERE}:checked" in str(err.value) and "scale0" in str(err.value)


def test_failing_body_names_op_node_source_and_cause():
    @tdl_op("_tofu_test_broken", inputs=("data",), cases=CASES)
    def broken(data, attrs):
        per_row = data.shape[0] // (data.ndim - 1)       # the bug: zero divisor for 1-D data
        return lambda *i: data[i] * per_row

    with pytest.raises(TDLError) as err:
        describe("_tofu_test_broken", Attrs.of(), [(2,)], [(2,)], node="b0")
    assert str(err.value).startswith(f"_tofu_test_broken (node 'b0') in {HERE}:broken: description failed: "
                                     "ZeroDivisionError")
    assert isinstance(err.value.__cause__, ZeroDivisionError)


def test_malformed_body_names_op_source_and_expression():
    @tdl_op("_tofu_test_rank", inputs=("data",), cases=CASES)
    def wrong_rank(data, attrs):
        return lambda i, j: data[i]

    with pytest.raises(TDLError, match=f"_tofu_test_rank in {HERE}:wrong_rank: access data\\[i\\] has rank 1 but "
                                       "'data' has rank 2"):
        describe("_tofu_test_rank", Attrs.of(), [(2, 3)], [(2, 3)])


def test_output_lambda_of_wrong_rank_names_the_output():
    @tdl_op("_tofu_test_out", inputs=("data",), cases=CASES)
    def flat(data, attrs):
        return lambda i: data[i // 3, i % 3]

    with pytest.raises(TDLError, match=f"_tofu_test_out in {HERE}:flat: output 'output': the lambda takes 1 index "
                                       "variables \\(i\\) but the tensor has rank 2"):
        describe("_tofu_test_out", Attrs.of(), [(2, 3)], [(2, 3)])


def test_too_few_output_lambdas_is_an_error():
    @tdl_op("_tofu_test_two", inputs=("data",), outputs=("output", "extra"), cases=CASES)
    def one_output(data, attrs):
        return lambda *i: data[i]

    assert len(describe("_tofu_test_two", Attrs.of(), [(2,)], [(2,)]).outputs) == 1    # a visible prefix
    with pytest.raises(TDLError, match=f"_tofu_test_two in {HERE}:one_output: the description returns 1 output "
                                       "lambdas, the node has 2 outputs"):
        describe("_tofu_test_two", Attrs.of(), [(2,)], [(2,), (2,)])
