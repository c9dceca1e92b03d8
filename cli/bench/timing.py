"""Interleaved repetitions: every repetition measures every cell once per variant, and the variant
order rotates after every measured cell, so slow phases of a shared machine hit all variants alike
and no variant always runs first."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

T = TypeVar("T")


def interleave(names: Sequence[str], cells: Sequence[Hashable], reps: int, measure: Callable[[str, Hashable], T],
               warm_up: Callable[[Hashable], bool] | None = None,
               log: Callable[[str], None] | None = None,
               include: Callable[[str, Hashable], bool] | None = None) -> dict[tuple[str, Hashable], list[T]]:
    """``measure(name, cell)`` for ``reps`` repetitions -> {(name, cell): [one result per repetition]}.

    With ``warm_up``, a first, discarded repetition measures the cells it accepts. With ``include``, a
    (name, cell) it refuses is never measured (its list stays empty); the order rotates as without it.
    """
    results: dict[tuple[str, Hashable], list[T]] = {(n, c): [] for c in cells for n in names}
    order = list(names)
    for rep in range(0 if warm_up else 1, reps + 1):  # rep 0 is the warm-up
        if log:
            log(f"bench: {'warm-up' if rep == 0 else f'repetition {rep}/{reps}'} ...")
        for cell in cells:
            if rep == 0 and not warm_up(cell):
                continue
            for name in order:
                if include and not include(name, cell):
                    continue
                result = measure(name, cell)
                if rep > 0:
                    results[(name, cell)].append(result)
            order = order[1:] + order[:1]
    return results
