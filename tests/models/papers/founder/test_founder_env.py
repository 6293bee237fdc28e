"""Gridworld dynamics, BFS distances, the two views and the offline data."""
from __future__ import annotations

import numpy as np

from edgesmith.models.papers.founder.env import GridWorld, collect_offline


def test_bfs_distances_go_around_the_wall_through_the_door():
    w = GridWorld()
    d = w.bfs_from((0, 2))
    assert d[0, 2] == 0 and d[0, 1] == 1
    assert d[0, 3] == -1  # wall
    # across the wall: down to the door row (3), through (3,3), back up: 3 + 1 + 1 + 3
    assert d[0, 4] == 8
    assert d[3, 3] == 4
    assert d[0, 6] == 10 and d[6, 0] == 8
    t = w.distance_table()
    assert t.max() == 12  # corner to opposite-room far corner: 6 to the door + 6 beyond
    assert t[w.index((0, 2)), w.index((0, 4))] == 8 and t[w.index((0, 4)), w.index((0, 2))] == 8


def test_moves_into_walls_or_edges_stay_put():
    w = GridWorld()
    assert w.step((0, 2), 3) == (0, 2)  # right into the wall
    assert w.step((0, 0), 0) == (0, 0)  # up off the grid
    assert w.step((3, 2), 3) == (3, 3)  # the door is free


def test_views_have_the_documented_shapes_and_view_b_noise_is_seeded():
    w = GridWorld()
    pos = np.array([[0, 0], [6, 6]])
    a = w.view_a(pos)
    assert a.shape == (2, 49) and a[0, 0] == 1 and a[1, 48] == 1 and a.sum() == 2
    e1 = w.view_b(pos, 16, 0.1, np.random.default_rng(3))
    e2 = w.view_b(pos, 16, 0.1, np.random.default_rng(3))
    assert e1.shape == (2, 16) and np.array_equal(e1, e2)
    clean = w.view_b(pos, 16, 0.0, np.random.default_rng(0))
    assert np.linalg.norm(clean[0] - clean[1]) > 0.5  # far cells render differently


def test_offline_data_follows_the_dynamics():
    w = GridWorld()
    pos, act = collect_offline(w, 5, 10, np.random.default_rng(0))
    assert pos.shape == (5, 11, 2) and act.shape == (5, 10)
    for i in range(5):
        for t in range(10):
            assert w.step(tuple(pos[i, t]), act[i, t]) == tuple(pos[i, t + 1])
    assert all(w.free[tuple(p)] for p in pos.reshape(-1, 2))
