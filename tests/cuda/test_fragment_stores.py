"""What storing an accumulator from its mma fragments rests on (ember.triton.compiler.cuda.epilogue;
the stores themselves are checked against NumPy in tests/tile/test_cuda.py): two adjacent
elements of a pair type at an even index are one store (ember.cuda.vectors.pair_store), a lane
reads its own floats of a fragment and nothing else (ember.cuda.fragments.element), and the
interpreter makes a warp's k-th collective call by the first lane to reach it, refusing a lane
that reads its fragment behind a call its warp made (ember.cuda.simt)."""

import numpy as np
import pytest

from ember.cuda import fragments
from ember.cuda.simt import Block, RaceError
from ember.cuda.vectors import pair_store, vector_lanes
from ember.errors import LowerError
from ember.tir.expr import Buffer, Var, binary, const
from ember.tir.stmt import BufferStore, For

V, T = Var("v", "int32"), Var("t", "int32")


def _pair(dtype: str, first, lanes: int = 2) -> For:
    out = Buffer("out", (64,), dtype)
    return For(V, 0, lanes, "vectorized", BufferStore(out, const(1.0, "float32"), (binary("+", first, V),)))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_two_adjacent_elements_at_an_even_index_are_one_store(dtype):
    even = binary("*", T, 2)
    assert pair_store(_pair(dtype, even)) is not None and vector_lanes(dtype, 2)
    assert pair_store(_pair(dtype, binary("+", even, 1))) is None  # (an odd index: two stores)
    assert pair_store(_pair(dtype, binary("*", T, 3))) is None  # (not known to be even)
    assert pair_store(_pair(dtype, even, lanes=4)) is None


def test_a_type_without_a_pair_keeps_two_stores():
    assert pair_store(_pair("int8", binary("*", T, 2))) is None and not vector_lanes("int8", 2)


def test_a_lane_reads_its_own_floats_of_a_fragment():
    frag = Buffer("frag", (32, 32), "float32", scope=fragments.SCOPE)
    lane = Var("tx", "int32")
    at = binary("+", binary("*", lane, 8), const(256 + 5))  # fragment 1, float 5 of the lane
    assert fragments.element(frag, "f", at, lane, str) == "f[1].x[5]"
    for wrong in (binary("*", lane, 4), binary("+", binary("*", lane, 8), const(9)), const(3)):
        with pytest.raises(LowerError, match="a lane reads its own floats of a fragment"):
            fragments.element(frag, "f", wrong, lane, str)
    with pytest.raises(LowerError, match="threadIdx.x"):
        fragments.element(frag, "f", at, None, str)


def test_a_warps_collective_call_is_made_once_and_a_lane_behind_it_may_not_read():
    block = Block("k", (0,))
    made = []
    for tid in (3, 0, 3, 35):  # lanes 3 and 0 of warp 0 at its first call, lane 3 at its second, warp 1's first
        block.tid = tid
        made.append(block.collective())
    assert made == [True, False, True, True]
    fragment = np.zeros(8)
    block.tid = 3
    assert block.in_step(fragment, "frag") is fragment  # (lane 3 has reached both calls)
    block.tid = 0
    with pytest.raises(RaceError, match="thread 0 reads fragment frag after its 1 collective calls while its warp "
                                        "made 2"):
        block.in_step(fragment, "frag")
