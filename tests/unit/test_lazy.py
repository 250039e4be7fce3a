"""The process-wide object made on first use (monitors/lazy.py): made once, replaced, made again."""

from __future__ import annotations

from monitors.lazy import Lazy


def test_made_once_on_first_use_replaced_and_made_again():
    made = []
    lazy = Lazy(lambda: made.append(object()) or made[-1])
    assert made == []  # nothing at creation
    first = lazy.get()
    assert lazy.get() is first and made == [first]
    assert lazy.set("swapped") is first and lazy.get() == "swapped"
    assert lazy.set(None) == "swapped"
    fresh = lazy.get()
    assert fresh is made[-1] and fresh is not first and len(made) == 2
