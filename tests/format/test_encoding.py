"""gitstate.format.encoding: values nested deeper than MAX_DEPTH are refused on write with an
EncodingError, without recursion (never RecursionError)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from gitstate.errors import EncodingError
from gitstate.format.encoding import MAX_DEPTH, check_value, dumps

# -- depth ------------------------------------------------------------------------------------------


def _nested_list(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _nested_dict(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels - 1):
        value = {"k": value}
    return value


@pytest.mark.parametrize("nest", [_nested_list, _nested_dict])
def test_hostile_depth_on_write_is_an_encoding_error(nest: Any) -> None:
    with pytest.raises(EncodingError, match=f"nested deeper than {MAX_DEPTH} levels"):
        dumps(nest(3000))
    with pytest.raises(EncodingError, match=f"nested deeper than {MAX_DEPTH} levels"):
        check_value(nest(3000))


def test_check_value_does_not_recurse() -> None:
    """check_value needs no Python stack per level: called with little stack left it still ends in
    an EncodingError (a recursive walk would raise RecursionError here)."""
    cyclic: list[Any] = []
    cyclic.append(cyclic)

    def at_depth(n: int) -> BaseException | None:
        if n:
            return at_depth(n - 1)
        try:
            check_value(cyclic)
        except EncodingError as exc:
            return exc
        return None

    assert isinstance(at_depth(sys.getrecursionlimit() - 60), EncodingError)


def test_check_value_reports_paths_and_types() -> None:
    with pytest.raises(EncodingError) as info:
        check_value({"a": [1, {"b": object()}]})
    assert info.value.path == "a[1].b" and "type object is not storable" in info.value.reason
    with pytest.raises(EncodingError, match="dict key True of type bool"):
        check_value({"a": {True: 1}})
    with pytest.raises(EncodingError, match="dict key 1.5 of type float"):
        check_value([{1.5: 1}])
    check_value({"a": [1, (2, {3: b"x"})], 4: None})


