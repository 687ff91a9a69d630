"""model/dc.py's dataclass behaves as the standard one: each class is declared twice, once per decorator, and every
generated method is compared on the same values (the standard decorator is the independent answer)."""

from __future__ import annotations

import dataclasses
import math
import pickle

import pytest

from llmdiag.diagnose.model import dc


def _pair(body: dict, **opts):
    """The same class body under the standard decorator and under dc's."""
    std = dataclasses.dataclass(type("C", (), dict(body)), **opts)
    ours = dc.dataclass(type("C", (), dict(body)), **opts)
    return std, ours


BODY = {"__annotations__": {"a": "int", "b": "list", "c": "float", "d": "str"},
        "b": dataclasses.field(default_factory=list, repr=False), "c": dataclasses.field(default=0.0, compare=False),
        "d": dataclasses.field(default="x", hash=False)}


@pytest.mark.parametrize("frozen", [False, True])
def test_same_methods_as_the_standard_decorator(frozen):
    std, ours = _pair(BODY, frozen=frozen)
    for args in [(1,), (1, [2], 3.0, "y"), (2, [], math.nan)]:
        s, o = std(*args), ours(*args)
        assert repr(s) == repr(o)
        assert (s == std(*args)) == (o == ours(*args))
        assert (s == s) == (o == o) and (s != s) == (o != o)
    assert ours(1, [], 1.0) == ours(1, [], 2.0)  # c is not compared
    assert ours(1, [], 1.0) != ours(2, [], 1.0)
    assert ours(1) != std(1) and ours(1).__eq__(object()) is NotImplemented
    if frozen:
        assert hash(std(1, (), 0.0, "p")) == hash(ours(1, (), 0.0, "q"))  # d is not hashed, c not compared
        with pytest.raises(dataclasses.FrozenInstanceError):
            ours(1).a = 2
    else:
        assert std.__hash__ is None and ours.__hash__ is None
    assert [f.name for f in dataclasses.fields(std)] == [f.name for f in dataclasses.fields(ours)]
    assert dataclasses.asdict(ours(1, [2])) == dataclasses.asdict(std(1, [2]))


def test_nan_field_equal_to_itself_as_a_tuple_compares():
    std, ours = _pair({"__annotations__": {"x": "float"}})
    n = math.nan
    assert (std(n) == std(n)) is (ours(n) == ours(n)) is True
    assert (std(math.nan) == std(float("nan"))) is (ours(math.nan) == ours(float("nan"))) is False


def test_own_methods_kept_and_explicit_hash():
    body = {"__annotations__": {"a": "int"}, "__repr__": lambda self: "mine", "__eq__": lambda self, o: True,
            "__hash__": lambda self: 7}
    for frozen in (False, True):
        std, ours = _pair(body, frozen=frozen)
        assert repr(ours(1)) == "mine" and ours(1) == ours(2) and hash(ours(1)) == hash(std(1)) == 7


def test_eq_off_keeps_identity_and_object_hash():
    std, ours = _pair({"__annotations__": {"a": "int"}}, eq=False)
    assert ours(1) != ours(1) and hash(ours.__hash__) is not None and ours.__hash__ is object.__hash__


def test_recursive_repr_and_empty_class():
    std, ours = _pair({"__annotations__": {"a": "object"}})
    s, o = std(None), ours(None)
    s.a, o.a = s, o
    assert repr(s) == repr(o)
    e_std, e_ours = _pair({})
    assert repr(e_std()) == repr(e_ours()) and e_ours() == e_ours()


def test_subclass_and_pickle():
    @dc.dataclass
    class Base:
        a: int = 0

    @dc.dataclass
    class Sub(Base):
        b: int = 1

    assert repr(Sub(2, 3)).endswith("Sub(a=2, b=3)") and Sub(2, 3) == Sub(2, 3) and Sub(2, 3) != Base(2)
    assert pickle.loads(pickle.dumps(_PICKLED)) == _PICKLED


@dc.dataclass(frozen=True)
class _Pickled:
    a: int
    b: tuple = ()


_PICKLED = _Pickled(1, (2,))
