"""A 7x7 two-room gridworld with two observation views and reward-free offline data.

Layout: a wall down column 3 with one door in the middle row, so cells a step or two apart across
the wall are 8 steps apart on foot; a similarity that ignores the dynamics cannot see that.

* view A (the world model's observation): one-hot of the agent's cell (49 values).
* view B (stands in for the foundation-model embedding, which the paper gets from a pretrained
  vision/language model): a different rendering, a Gaussian blob at the agent's position on a 14x14
  canvas, through a fixed random projection (seeded) to ``emb_dim`` values, plus Gaussian noise.
* offline data: random-walk trajectories with sticky actions (the previous action is repeated with
  probability 0.5) from uniformly random free start cells; no rewards are recorded.
"""
from __future__ import annotations

from collections import deque

import numpy as np

LAYOUT = (
    "...#...",
    "...#...",
    "...#...",
    ".......",
    "...#...",
    "...#...",
    "...#...",
)
MOVES = np.array([(-1, 0), (1, 0), (0, -1), (0, 1)])  # up, down, left, right
N_ACTIONS = len(MOVES)
CANVAS = 14
PROJECTION_SEED = 12345  # the "foundation model" is fixed: the same projection for every run


class GridWorld:
    """Deterministic moves on the free cells of ``layout``; a move into a wall or the edge stays put."""

    def __init__(self, layout: tuple[str, ...] = LAYOUT):
        self.layout = layout
        self.rows, self.cols = len(layout), len(layout[0])
        self.free = np.array([[c == "." for c in row] for row in layout])
        self.cells = [(r, c) for r in range(self.rows) for c in range(self.cols) if self.free[r, c]]

    @property
    def n_cells(self) -> int:
        return self.rows * self.cols

    def index(self, pos) -> int:
        return int(pos[0]) * self.cols + int(pos[1])

    def step(self, pos, action: int) -> tuple[int, int]:
        r, c = int(pos[0]) + MOVES[action][0], int(pos[1]) + MOVES[action][1]
        if 0 <= r < self.rows and 0 <= c < self.cols and self.free[r, c]:
            return (int(r), int(c))
        return (int(pos[0]), int(pos[1]))

    def bfs_from(self, goal) -> np.ndarray:
        """Shortest-path step counts from every cell to ``goal`` (-1 for walls)."""
        dist = np.full((self.rows, self.cols), -1, dtype=np.int64)
        dist[goal] = 0
        queue = deque([tuple(goal)])
        while queue:
            pos = queue.popleft()
            for a in range(N_ACTIONS):
                nxt = self.step(pos, a)
                if dist[nxt] < 0:
                    dist[nxt] = dist[pos] + 1
                    queue.append(nxt)
        return dist

    def distance_table(self) -> np.ndarray:
        """(n_cells, n_cells) BFS distances between cell indices (-1 where either is a wall)."""
        table = np.full((self.n_cells, self.n_cells), -1, dtype=np.int64)
        for goal in self.cells:
            d = self.bfs_from(goal)
            table[:, self.index(goal)] = d.reshape(-1)
        return table

    # --- views -----------------------------------------------------------------------------------
    def view_a(self, positions: np.ndarray) -> np.ndarray:
        """One-hot cells, (..., 49) float32."""
        positions = np.asarray(positions)
        idx = positions[..., 0] * self.cols + positions[..., 1]
        return np.eye(self.n_cells, dtype=np.float32)[idx]

    def render_b(self, positions: np.ndarray) -> np.ndarray:
        """The second rendering: a blob at the agent's centre on a CANVAS x CANVAS image, (..., CANVAS**2)."""
        positions = np.asarray(positions, dtype=np.float64)
        scale = CANVAS / self.rows
        ys, xs = np.meshgrid(np.arange(CANVAS) + 0.5, np.arange(CANVAS) + 0.5, indexing="ij")
        cy = (positions[..., 0] + 0.5) * scale
        cx = (positions[..., 1] + 0.5) * scale
        img = np.exp(-((ys - cy[..., None, None]) ** 2 + (xs - cx[..., None, None]) ** 2) / (2 * 1.5 ** 2))
        return img.reshape(*positions.shape[:-1], CANVAS * CANVAS)

    def view_b(self, positions: np.ndarray, emb_dim: int, noise: float, rng: np.random.Generator) -> np.ndarray:
        """Fixed random projection of ``render_b`` plus N(0, noise^2) noise, (..., emb_dim) float32."""
        proj = np.random.default_rng(PROJECTION_SEED).standard_normal((CANVAS * CANVAS, emb_dim)) / np.sqrt(emb_dim)
        e = self.render_b(positions) @ proj
        return (e + noise * rng.standard_normal(e.shape)).astype(np.float32)


def collect_offline(world: GridWorld, n_traj: int, length: int, rng: np.random.Generator,
                    sticky: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Reward-free random-walk data: positions (n, length + 1, 2) int64 and actions (n, length) int64."""
    pos = np.zeros((n_traj, length + 1, 2), dtype=np.int64)
    act = np.zeros((n_traj, length), dtype=np.int64)
    for i in range(n_traj):
        p = world.cells[rng.integers(len(world.cells))]
        pos[i, 0] = p
        a = int(rng.integers(N_ACTIONS))
        for t in range(length):
            if rng.random() >= sticky:
                a = int(rng.integers(N_ACTIONS))
            act[i, t] = a
            p = world.step(p, a)
            pos[i, t + 1] = p
    return pos, act
