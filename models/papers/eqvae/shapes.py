"""Procedural shapes: anti-aliased circles, squares and triangles on a black background (generated here).

Every shape has a random centre, radius, rotation and grey level; later shapes paint over earlier
ones. Edges are anti-aliased from the signed distance to the outline, so the images survive the
bilinear rescaling that EQ-VAE applies to them. The shape distribution is invariant to
90-degree rotations, so a rotated image is as typical as the original.
"""
from __future__ import annotations

import math

import numpy as np

from edgesmith.models.papers.eqvae.config import ShapesConfig

KINDS = ("circle", "square", "triangle")


def signed_distance(kind: int, u: np.ndarray, v: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Signed distance (pixels, negative inside) of points (u, v), in each shape's own rotated frame.

    Polygons use the largest edge half-plane distance: exact along edges, which is all the
    one-pixel anti-aliasing ramp needs.
    """
    if KINDS[kind] == "circle":
        return np.sqrt(u * u + v * v) - r
    if KINDS[kind] == "square":  # half side 0.8 r: about the circle's area
        return np.maximum(np.abs(u), np.abs(v)) - 0.8 * r
    # equilateral triangle with circumradius r (inradius r / 2)
    return np.max([-(u * math.cos(a) + v * math.sin(a)) - r / 2
                   for a in (math.pi / 2 + 2 * math.pi * k / 3 for k in range(3))], axis=0)


def draw_shapes(rng: np.random.Generator, n: int, size: int, max_shapes: int) -> dict[str, np.ndarray]:
    """Parameters of up to ``max_shapes`` shapes for each of ``n`` images, arrays [n, max_shapes] in pixels."""
    count = rng.integers(1, max_shapes + 1, size=n)
    shape = (n, max_shapes)
    return {
        "present": np.arange(max_shapes)[None, :] < count[:, None],
        "kind": rng.integers(len(KINDS), size=shape),
        "radius": rng.uniform(0.12, 0.3, size=shape) * size,
        "cx": rng.uniform(0.3, 0.7, size=shape) * size,
        "cy": rng.uniform(0.3, 0.7, size=shape) * size,
        "angle": rng.uniform(0, 2 * math.pi, size=shape),
        "grey": rng.uniform(0.35, 1.0, size=shape),
    }


def render(params: dict[str, np.ndarray], size: int) -> np.ndarray:
    """[n, size, size] float32 images of the shapes in ``params`` (see ``draw_shapes``); later slots paint over.

    Pixel coverage is clip(0.5 - signed distance, 0, 1): a one-pixel anti-aliased edge.
    """
    coords = np.arange(size, dtype=np.float32) + 0.5
    px, py = coords[None, None, :], coords[None, :, None]  # x runs along columns, y along rows
    img = np.zeros((len(params["present"]), size, size), dtype=np.float32)
    for slot in range(params["present"].shape[1]):
        col = {k: v[:, slot].astype(np.float32)[:, None, None] for k, v in params.items() if k not in ("present", "kind")}
        c, s = np.cos(col["angle"]), np.sin(col["angle"])
        dx, dy = px - col["cx"], py - col["cy"]
        u, v = c * dx + s * dy, -s * dx + c * dy
        cover = np.zeros(img.shape, dtype=np.float32)
        for kind in range(len(KINDS)):
            sel = (params["kind"][:, slot] == kind) & params["present"][:, slot]
            if sel.any():
                cover[sel] = np.clip(0.5 - signed_distance(kind, u[sel], v[sel], col["radius"][sel]), 0.0, 1.0)
        img = img * (1 - cover) + col["grey"] * cover
    return img


def make_images(n: int, size: int, max_shapes: int, seed: int) -> np.ndarray:
    """[n, 1, size, size] float32 images in [0, 1], the same for the same arguments."""
    return render(draw_shapes(np.random.default_rng(seed), n, size, max_shapes), size)[:, None]


def load_splits(cfg: ShapesConfig) -> dict[str, np.ndarray]:
    """Train and test images from disjoint random streams of ``cfg.seed``."""
    ss = np.random.SeedSequence(cfg.seed).spawn(2)
    return {
        "train": make_images(cfg.n_train, cfg.size, cfg.max_shapes, int(ss[0].generate_state(1)[0])),
        "test": make_images(cfg.n_test, cfg.size, cfg.max_shapes, int(ss[1].generate_state(1)[0])),
    }
