"""tofu.tdl.lang: the one import of a description file. Every module of operators_tdl/ has every public name
of the DSL, so a description added to any family (needing ``compute``, ``abs_``, ``Max``, ``NoAttrs``, ...)
needs no new import; before, each family imported only what its own descriptions used.
"""
import importlib
import inspect

import pytest

import operators_tdl
import tofu.tdl.expr as expr
import tofu.tdl.lang as lang


def test_lang_exports_the_dsl():
    assert set(lang.__all__) <= set(dir(lang))
    assert {"compute", "abs_", "Max", "NoAttrs", "Case", "tdl_op", "tdl_expansion", "TDLError", "TensorVar",
            "Sum", "where", "IndexValue", "uses", "nary", "Opaque", "NEG_INF", "dataclass"} <= set(lang.__all__)


def test_lang_exports_every_math_function_and_comparison():
    named = {"abs": "abs_", "round": "round_", "neg": None}
    for fn in (*expr.UNARY, *expr.COMPARE, "maximum", "minimum"):
        name = named.get(fn, fn)
        if name is not None:
            assert name in lang.__all__, f"tofu.tdl.lang does not export {name}"


def test_lang_exports_every_public_builder_of_expr():
    """Every public function and class of tofu.tdl.expr that a description calls is exported, except the
    analysis' own helpers."""
    internal = {"as_index", "as_value", "index_vars", "lambda_vars", "call_lambda", "direct_extents", "children",
                "walk_accesses", "Affine", "FloorDiv", "Mod", "Const", "Unary", "Binary", "Compare", "Select",
                "Uses", "Access", "Reduce", "OpaqueCall", "TensorLike", "dataclass", "field", "Union", "TDLError"}
    public = {n for n, v in vars(expr).items() if not n.startswith("_") and (inspect.isfunction(v) or
              inspect.isclass(v)) and getattr(v, "__module__", "") == expr.__name__}
    assert public - internal <= set(lang.__all__), sorted(public - internal - set(lang.__all__))


@pytest.mark.parametrize("family", operators_tdl.FAMILIES)
def test_every_family_module_has_the_whole_dsl(family):
    module = importlib.import_module(f"operators_tdl.{family}")
    missing = [n for n in lang.__all__ if getattr(module, n, None) is not getattr(lang, n)]
    assert not missing, f"operators_tdl/{family}.py lacks (or shadows) {missing}: import tofu.tdl.lang's names"
