"""Tree geometry (turbospec/spec/tree.py) on hand-built trees."""
from __future__ import annotations

import pytest
import torch

from turbospec.spec.tree import (ancestor_matrix, chain_parents, depths, kv_compaction_plan,
                                 path_to, positions, tree_attention_mask)

#        root
#       /    \
#      0      1
#     / \     |
#    2   3    4
#        |
#        5
TREE = torch.tensor([[-1, -1, 0, 0, 1, 3]])


def test_chain_parents():
    assert chain_parents(2, 4).tolist() == [[-1, 0, 1, 2]] * 2
    assert chain_parents(1, 0).shape == (1, 0)


def test_depths_and_positions():
    assert depths(TREE).tolist() == [[1, 1, 2, 2, 2, 3]]
    assert depths(chain_parents(1, 4)).tolist() == [[1, 2, 3, 4]]
    both = torch.cat([TREE, chain_parents(1, 6)])
    assert positions(torch.tensor([10, 3]), both).tolist() == [[10, 11, 11, 12, 12, 12, 13],
                                                               [3, 4, 5, 6, 7, 8, 9]]


def test_ancestor_matrix():
    anc = ancestor_matrix(TREE)[0]
    assert anc[5].nonzero().flatten().tolist() == [0, 3, 5]
    assert anc[4].nonzero().flatten().tolist() == [1, 4]
    assert anc[2].nonzero().flatten().tolist() == [0, 2]


def test_tree_mask_hand_built():
    m = tree_attention_mask(TREE, [6])[0].int()
    expected = [[1, 0, 0, 0, 0, 0, 0],    # root
                [1, 1, 0, 0, 0, 0, 0],    # node 0
                [1, 0, 1, 0, 0, 0, 0],    # node 1
                [1, 1, 0, 1, 0, 0, 0],    # node 2 (under 0)
                [1, 1, 0, 0, 1, 0, 0],    # node 3 (under 0)
                [1, 0, 1, 0, 0, 1, 0],    # node 4 (under 1)
                [1, 1, 0, 0, 1, 0, 1]]    # node 5 (under 3)
    assert m.tolist() == expected


def test_chain_mask_is_causal_and_padding_sees_itself():
    m = tree_attention_mask(chain_parents(2, 4), torch.tensor([4, 2]))
    assert torch.equal(m[0], torch.ones(5, 5, dtype=torch.bool).tril())
    expected = torch.ones(5, 5, dtype=torch.bool).tril()
    expected[3:] = False
    expected[3, 3] = expected[4, 4] = True
    assert torch.equal(m[1], expected)


def test_path_to():
    assert path_to(TREE[0], 5) == [0, 3, 5]
    assert path_to([-1, -1, 0, 0, 1, 3], 4) == [1, 4]
    assert path_to(TREE[0], -1) == []
    with pytest.raises(ValueError, match="cycle"):
        path_to([1, 0], 0)


def test_kv_compaction_plan():
    accepted = torch.tensor([[0, 3, 5, -1, -1, -1],     # tree path root -> 0 -> 3 -> 5
                             [1, 4, -1, -1, -1, -1],    # root -> 1 -> 4
                             [0, 1, 2, -1, -1, -1],     # a chain: already in place
                             [-1, -1, -1, -1, -1, -1]])  # nothing accepted
    src, moves = kv_compaction_plan(accepted)
    assert src.tolist() == [[1, 4, 6, -1, -1, -1], [2, 5, -1, -1, -1, -1],
                            [1, 2, 3, -1, -1, -1], [-1] * 6]
    assert moves.tolist() == [[False, True, True, False, False, False],
                              [True, True, False, False, False, False],
                              [False] * 6, [False] * 6]
