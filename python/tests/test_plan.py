"""simhashdb.Plan: permutations, prefixes, and find_all split by table and
prefix (the primitive simhashdb.spark partitions by) against brute force."""

import pickle

import numpy as np
import pytest
from conftest import brute_pairs, planted

from simhashdb import Plan, find_all


@pytest.mark.parametrize(
    "plan",
    [Plan(4, k=3), Plan(6, k=3), Plan.nested(4, 4, 3), Plan(1, k=0), Plan(5, k=2)],
    ids=repr,
)
def test_find_all_in_table_over_prefix_groups_equals_brute_force(rng, plan):
    fps = planted(rng, 1500, max_flip=plan.k + 2)
    # A skewed prefix: 200 values varying only in their 14 lowest bits.
    dense = np.uint64(0x5A5A_5A5A_5A5A_0000) | rng.integers(0, 1 << 14, size=200, dtype=np.uint64)
    fps = np.concatenate([fps, dense, fps[:40]])  # and exact duplicates
    found = []
    for t in range(plan.table_count):
        bits = plan.prefix_bits(t)
        keys = plan.permute(fps, t) >> np.uint64(64 - bits) if bits < 64 else plan.permute(fps, t)
        for key in np.unique(keys):
            members = np.flatnonzero(keys == key)
            for a, b in plan.find_all_in_table(fps[members], t):
                found.append((members[a], members[b]))
    assert len(found) == len(set(found)), "a pair was reported by two groups"
    expected = brute_pairs(fps, plan.k)
    assert sorted(found) == [tuple(p) for p in expected.tolist()]
    assert np.array_equal(find_all(fps, k=plan.k, blocks=None), expected)


def test_permute_moves_the_prefix_blocks_first():
    plan = Plan(4, k=3)  # one 16-bit block per table
    fp = 0x1111_2222_3333_4444
    prefixes = sorted(int(plan.permute([fp], t)[0]) >> 48 for t in range(plan.table_count))
    assert prefixes == [0x1111, 0x2222, 0x3333, 0x4444]
    assert [plan.prefix_bits(t) for t in range(4)] == [16] * 4


def test_plans_describe_and_pickle_themselves():
    for plan in [Plan(6, k=3), Plan.nested(4, 4, 3), Plan.auto(10**9, 3)]:
        copy = pickle.loads(pickle.dumps(plan))
        assert copy == plan and copy.shape == plan.shape and copy.k == plan.k
        assert repr(copy) == repr(plan)
    assert Plan(6, k=3).shape == ("flat", 6) and Plan(6, k=3).table_count == 20
    assert Plan.nested(4, 4, 3).shape == ("nested", 4, 4)
    assert Plan.nested(4, 4, 3).table_count == 16
    assert Plan(6, k=3) != Plan(6, k=2)


def test_bad_plans_and_tables_are_value_errors():
    with pytest.raises(ValueError, match="blocks"):
        Plan(3, k=3)
    with pytest.raises(ValueError, match=r"table must be in \[0, 4\)"):
        Plan(4, k=3).find_all_in_table([1, 2], 4)
    with pytest.raises(ValueError, match=r"table must be in \[0, 4\)"):
        Plan(4, k=3).permute([1], 9)
