"""The halo trims a shard call tries, in the order of the plain enumeration they replace."""
import itertools

import pytest

from tofu.analysis.shard import _cuts_by_total


@pytest.mark.parametrize("ends", [(), (0,), (3,), (1, 2), (2, 0, 3), (4, 4, 1, 2), (0, 0, 0)])
def test_cuts_by_total_equals_sorted_product(ends):
    expected = sorted((c for c in itertools.product(*(range(e + 1) for e in ends)) if any(c)), key=sum)
    assert list(_cuts_by_total(ends)) == expected


def test_cuts_by_total_is_lazy_on_large_halos():
    # 8 dimensions with halos of 30: the product has 31**8 tuples; the first 16 come without enumerating it
    first = list(itertools.islice(_cuts_by_total((30,) * 8), 16))
    assert [sum(c) for c in first] == [1] * 8 + [2] * 8
    assert first[0] == (0,) * 7 + (1,) and first[8] == (0,) * 7 + (2,) and first[9] == (0,) * 6 + (1, 1)
