"""Numba kernels: fit one histogram tree on binned features, and predict with a tree ensemble.

Every tree is stored as a complete binary tree of depth ``D`` in heap order (node ``i`` has
children ``2i+1`` and ``2i+2``; ``x[f] > t`` goes right), with ``2^D - 1`` split nodes and
``2^D`` leaves. A node that does not split (greedy growth stopped, or an oblivious level found no
valid candidate) gets a dummy split with threshold ``+inf``: everything goes left and the leaf
under it holds the node's mean, so prediction is a fixed-depth, branch-light walk for every
tree and exporters need no special cases.

Split scores follow GBRL (``S`` gradient sum, ``n`` count of a side):
``l2 = |S_L|^2/n_L + |S_R|^2/n_R`` on centred, std-scaled gradients;
``cosine = sqrt(|S_L|^2/n_L + |S_R|^2/n_R)`` on raw gradients (GBRL's ratio of the summed
dot products with the side means to the root of the side norms simplifies to exactly this).
Greedy trees pick, per node, the best candidate and split when it beats the node's own score
(``|S|^2/n``, square-rooted for cosine; 0 at the root). Oblivious trees sum the per-node scores
over a level and pick one split for the whole level. Ties go to the lowest feature, then the
lowest threshold (GBRL's scan order). A candidate already used on the path is not reused.
Histograms hold per-bin gradient sums plus a count; the larger child's histogram is the parent's
minus the smaller child's.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

COSINE, L2 = 0, 1


@njit(cache=True, inline="always")
def _side(S, cnt):
    if cnt <= 0.0:
        return 0.0
    s2 = 0.0
    for c in range(S.shape[0]):
        s2 += S[c] * S[c]
    return s2 / cnt


@njit(parallel=True, cache=True)
def _build_hists(xb, G, rows, starts, ends, out):
    """Fill ``out[:T]`` (``(T, d, nb, k+1)``) with histograms of the row segments ``rows[starts[t]:ends[t]]``."""
    d = xb.shape[0]
    k = G.shape[1]
    T = starts.shape[0]
    for job in prange(T * d):
        t = job // d
        f = job % d
        h = out[t, f]
        h[:] = 0.0
        xf = xb[f]
        for p in range(starts[t], ends[t]):
            r = rows[p]
            b = xf[r]
            for c in range(k):
                h[b, c] += G[r, c]
            h[b, k] += 1.0


def workspace(depth: int, d: int, nb: int, k: int) -> np.ndarray:
    """Histogram buffers reused across trees: (current level, next level, smaller children).

    Fresh multi-MB arrays per tree would cost more in page faults than the histograms themselves.
    """
    width = 1 << max(depth - 1, 0)
    return np.zeros((3, width, d, nb, k + 1), dtype=np.float64)


@njit(cache=True)
def _on_path(node, f, j, feat, sbin):
    p = node
    while p > 0:
        p = (p - 1) // 2
        if feat[p] == f and sbin[p] == j:
            return True
    return False


@njit(cache=True)
def _node_totals(hist):
    """Gradient sums and counts ``(T, k+1)`` of each node (read from feature 0's histogram)."""
    T, d, nb, k1 = hist.shape
    tot = np.zeros((T, k1))
    for t in range(T):
        for b in range(nb):
            for c in range(k1):
                tot[t, c] += hist[t, 0, b, c]
    return tot


@njit(parallel=True, cache=True)
def _scan_nodes(hist, tots, nodes, n_thr, score_kind, min_leaf, feat, sbin):
    """Best (score, bin) per (node, feature) for greedy growth; -inf where nothing is valid.

    A candidate whose bin is empty splits the node exactly like the one before it, so it can only
    tie, and ties go to the lower threshold: it is skipped unless the one before was path-blocked.
    """
    T, d, nb, k1 = hist.shape
    k = k1 - 1
    best = np.full((T, d), -np.inf)
    best_j = np.full((T, d), -1, dtype=np.int32)
    lo = max(min_leaf, 1)
    for job in prange(T * d):
        t = job // d
        f = job % d
        h = hist[t, f]
        n = tots[t, k]
        SL = np.zeros(k)
        SR = np.empty(k)
        nl = 0.0
        prev_scored = False
        for j in range(n_thr[f]):
            cnt = h[j, k]
            if cnt == 0.0 and prev_scored:
                continue
            for c in range(k):
                SL[c] += h[j, c]
            nl += cnt
            nr = n - nl
            prev_scored = False
            if nl < lo:
                continue
            if nr < lo:
                break
            if _on_path(nodes[t], f, j, feat, sbin):
                continue
            prev_scored = True
            for c in range(k):
                SR[c] = tots[t, c] - SL[c]
            s = _side(SL, nl) + _side(SR, nr)
            if score_kind == COSINE:
                s = np.sqrt(s)
            if s > best[t, f]:
                best[t, f] = s
                best_j[t, f] = j
    return best, best_j


@njit(parallel=True, cache=True)
def _scan_level(hist, tots, n_thr, score_kind, min_leaf):
    """Summed per-node scores ``(d, nb)`` of every candidate for one oblivious level."""
    T, d, nb, k1 = hist.shape
    k = k1 - 1
    total = np.zeros((d, nb))
    for f in prange(d):
        SL = np.zeros(k)
        SR = np.empty(k)
        for t in range(T):
            h = hist[t, f]
            n = tots[t, k]
            SL[:] = 0.0
            nl = 0.0
            s = 0.0
            for j in range(n_thr[f]):
                cnt = h[j, k]
                if cnt != 0.0 or j == 0:  # an empty bin leaves this node's split, and its score, unchanged
                    for c in range(k):
                        SL[c] += h[j, c]
                    nl += cnt
                    nr = n - nl
                    if nl < min_leaf or nr < min_leaf:
                        s = -np.inf
                    else:
                        for c in range(k):
                            SR[c] = tots[t, c] - SL[c]
                        s = _side(SL, nl) + _side(SR, nr)
                        if score_kind == COSINE:
                            s = np.sqrt(s)
                total[f, j] += s
        for j in range(n_thr[f], nb):
            total[f, j] = -np.inf
    return total


@njit(parallel=True, cache=True)
def _partition(xb, rows, buf, starts, ends, fs, js, mids):
    """Stable in-place split of each segment: rows with bin <= j first; ``mids`` gets the cut."""
    for t in prange(starts.shape[0]):
        s, e, f, j = starts[t], ends[t], fs[t], js[t]
        if j < 0:  # dummy split: everything goes left
            mids[t] = e
            continue
        w = s
        r_w = s
        for p in range(s, e):
            r = rows[p]
            if xb[f, r] <= j:
                rows[w] = r
                w += 1
            else:
                buf[r_w] = r
                r_w += 1
        for p in range(s, r_w):
            rows[w + p - s] = buf[p]
        mids[t] = w


@njit(cache=True)
def fit_tree(xb, n_thr, G, Graw, depth, score_kind, min_leaf, oblivious, ws):
    """Grow one tree; returns heap-order split features, split bins (-1: dummy) and leaf values."""
    d, n = xb.shape
    k = Graw.shape[1]
    n_split = (1 << depth) - 1
    n_nodes = (1 << (depth + 1)) - 1
    feat = np.zeros(n_split, dtype=np.int32)
    sbin = np.full(n_split, -1, dtype=np.int32)
    seg_s = np.zeros(n_nodes, dtype=np.int64)
    seg_e = np.zeros(n_nodes, dtype=np.int64)
    frozen = np.zeros(n_nodes, dtype=np.bool_)
    rows = np.arange(n).astype(np.int64)
    buf = np.empty(n, dtype=np.int64)
    seg_e[0] = n
    cur = 0  # ws[cur] holds this level's histograms, ws[1 - cur] receives the next level's, ws[2] the builds
    _build_hists(xb, G, rows, seg_s[:1], seg_e[:1], ws[0])
    hist = ws[0, :1]
    for level in range(depth):
        first = (1 << level) - 1
        width = 1 << level
        nodes = np.arange(first, first + width)
        fs = np.zeros(width, dtype=np.int32)
        js = np.full(width, -1, dtype=np.int32)
        if oblivious:
            if not frozen[first]:
                total = _scan_level(hist, _node_totals(hist), n_thr, score_kind, min_leaf)
                bs, bf, bj = -np.inf, 0, -1
                for f in range(d):
                    for j in range(n_thr[f]):
                        if total[f, j] > bs and not _on_path(first, f, j, feat, sbin):
                            bs, bf, bj = total[f, j], f, j
                if bj >= 0:
                    fs[:] = bf
                    js[:] = bj
        else:
            kk = G.shape[1]
            tots = _node_totals(hist)
            best, best_j = _scan_nodes(hist, tots, nodes, n_thr, score_kind, min_leaf, feat, sbin)
            for t in range(width):
                node = first + t
                if frozen[node] or seg_e[node] == seg_s[node]:
                    continue
                parent = 0.0
                if level > 0:
                    parent = _side(tots[t, :kk], tots[t, kk])
                    if score_kind == COSINE:
                        parent = np.sqrt(parent)
                bs, bf, bj = -np.inf, 0, -1
                for f in range(d):
                    if best[t, f] > bs:
                        bs, bf, bj = best[t, f], f, best_j[t, f]
                if bj >= 0 and bs - parent > 0.0:
                    fs[t] = bf
                    js[t] = bj
        for t in range(width):
            feat[first + t] = fs[t]
            sbin[first + t] = js[t]
        mids = np.empty(width, dtype=np.int64)
        _partition(xb, rows, buf, seg_s[first:first + width], seg_e[first:first + width], fs, js, mids)
        for t in range(width):
            node = first + t
            left, right = 2 * node + 1, 2 * node + 2
            seg_s[left], seg_e[left] = seg_s[node], mids[t]
            seg_s[right], seg_e[right] = mids[t], seg_e[node]
            if js[t] < 0:
                frozen[left] = True
                frozen[right] = True
        if level + 1 == depth:
            break
        # histograms of the next level: build the smaller child of each real split, subtract for the other
        cw = 2 * width
        b_s = np.empty(width, dtype=np.int64)
        b_e = np.empty(width, dtype=np.int64)
        small_is_left = np.zeros(width, dtype=np.bool_)
        for t in range(width):
            node = first + t
            nl = mids[t] - seg_s[node]
            nr = seg_e[node] - mids[t]
            if js[t] >= 0 and nl <= nr:
                small_is_left[t] = True
                b_s[t], b_e[t] = seg_s[node], mids[t]
            elif js[t] >= 0:
                b_s[t], b_e[t] = mids[t], seg_e[node]
            else:
                b_s[t], b_e[t] = 0, 0  # dummy: the right child is empty
        _build_hists(xb, G, rows, b_s, b_e, ws[2])
        small = ws[2, :width]
        new = ws[1 - cur, :cw]
        for t in range(width):
            a, b = 2 * t, 2 * t + 1
            if js[t] < 0:
                new[a] = hist[t]
                new[b] = 0.0
                continue
            if not small_is_left[t]:
                a, b = b, a
            new[a] = small[t]
            big = new[b]
            src = hist[t]
            sm = small[t]
            for f in range(d):
                for q in range(src.shape[1]):  # all bins: the buffer may hold a wider earlier tree
                    for c in range(k + 1):
                        big[f, q, c] = src[f, q, c] - sm[f, q, c]
        hist = new
        cur = 1 - cur
    # leaf values: mean raw gradient of the rows in each leaf, 0 for an empty leaf
    n_leaves = 1 << depth
    leaves = np.zeros((n_leaves, k), dtype=np.float32)
    for leaf in range(n_leaves):
        node = n_split + leaf
        s, e = seg_s[node], seg_e[node]
        if e == s:
            continue
        acc = np.zeros(k)
        for p in range(s, e):
            r = rows[p]
            for c in range(k):
                acc[c] += Graw[r, c]
        for c in range(k):
            leaves[leaf, c] = acc[c] / (e - s)
    return feat, sbin, leaves


# --- prediction -------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _leaf_greedy(x, feat_t, thr_t, depth):
    node = 0
    for _ in range(depth):
        node = 2 * node + 1 + (1 if x[feat_t[node]] > thr_t[node] else 0)
    return node - ((1 << depth) - 1)


@njit(cache=True, inline="always")
def _leaf_oblivious(x, feat_t, thr_t, depth):
    # every node of a level shares its split, so the level tests are independent of each other
    idx = 0
    for lv in range(depth):
        h = (1 << lv) - 1
        idx = 2 * idx + (1 if x[feat_t[h]] > thr_t[h] else 0)
    return idx


@njit(cache=True)
def _sum_rows_rowwise(X, feat, thr, leaves, depth, oblivious, t0, t1, out, i0, i1):
    """Leaf sums for rows ``[i0, i1)``, one row through all trees at a time (best for 1-3 rows)."""
    k = leaves.shape[2]
    acc = np.empty(k, dtype=np.float64)
    for i in range(i0, i1):
        x = X[i]
        acc[:] = 0.0
        for t in range(t0, t1):
            if oblivious:
                leaf = _leaf_oblivious(x, feat[t], thr[t], depth)
            else:
                leaf = _leaf_greedy(x, feat[t], thr[t], depth)
            lv = leaves[t, leaf]
            for c in range(k):
                acc[c] += lv[c]
        for c in range(k):
            out[i, c] = acc[c]


@njit(cache=True)
def _sum_rows(X, feat, thr, leaves, depth, oblivious, t0, t1, out, i0, i1):
    """Leaf sums for rows ``[i0, i1)``. Oblivious trees with several rows go trees-outer, rows-inner,
    so each level's split is read once per block of rows; otherwise row by row."""
    if not oblivious or i1 - i0 < 4:
        _sum_rows_rowwise(X, feat, thr, leaves, depth, oblivious, t0, t1, out, i0, i1)
        return
    k = leaves.shape[2]
    nr = i1 - i0
    acc = np.zeros((nr, k), dtype=np.float64)
    lf = np.empty(nr, dtype=np.int64)
    for t in range(t0, t1):
        ft = feat[t]
        tt = thr[t]
        lf[:] = 0
        for lv in range(depth):
            h = (1 << lv) - 1
            f = ft[h]
            v = tt[h]
            for r in range(nr):
                lf[r] = 2 * lf[r] + (1 if X[i0 + r, f] > v else 0)
        lv_t = leaves[t]
        for r in range(nr):
            row = lv_t[lf[r]]
            for c in range(k):
                acc[r, c] += row[c]
    for r in range(nr):
        for c in range(k):
            out[i0 + r, c] = acc[r, c]


@njit(cache=True)
def leaf_sums_serial(X, feat, thr, leaves, depth, oblivious, t0, t1):
    """Sum over trees ``[t0, t1)`` of each row's leaf values, one thread (batch-1 latency path)."""
    out = np.empty((X.shape[0], leaves.shape[2]), dtype=np.float64)
    _sum_rows(X, feat, thr, leaves, depth, oblivious, t0, t1, out, 0, X.shape[0])
    return out


@njit(parallel=True, cache=True)
def leaf_sums_parallel(X, feat, thr, leaves, depth, oblivious, t0, t1):
    """As ``leaf_sums_serial`` with rows split into blocks across threads."""
    n = X.shape[0]
    out = np.empty((n, leaves.shape[2]), dtype=np.float64)
    block = 64
    nblk = (n + block - 1) // block
    for b in prange(nblk):
        _sum_rows(X, feat, thr, leaves, depth, oblivious, t0, t1, out, b * block, min(n, (b + 1) * block))
    return out
