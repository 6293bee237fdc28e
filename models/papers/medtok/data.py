"""A synthetic medical ontology, code descriptions and patient sequences, generated here (no download).

Ontology: a tree root -> chapters -> groups -> codes (the leaves are the medical codes), plus random
co-occurrence edges between codes (most within a chapter). Every ontology node has a fixed random
feature vector (a stand-in for a learned node embedding) and a one-hot node type.

Descriptions: token ids of a few words: the code's own word, its group's word only with probability
``p_group_word`` (real descriptions often do not name their category), its chapter's word with
probability ``p_chapter_word``, and filler words; padded with 0. So text alone reveals the ancestry of
only some codes, while the graph neighbourhood (parent, grandparent, siblings, co-occurring codes)
always does.

Graph input of a code: its ego neighbourhood of ``n_graph_nodes`` nodes (the code, its parent group,
its chapter, up to ``n_siblings`` siblings and up to ``n_cooc`` co-occurring codes, zero-padded), as
node features, the symmetrically normalised adjacency with self-loops D^-1/2 (A + I) D^-1/2 (computed
here, in preprocessing), and a node mask.

Patients: ``seq_len`` codes each, half from a dominant chapter; label 1 when at least two codes
belong to the "risk" groups (a property of ancestry, not of single codes), flipped with probability
``label_noise``. A fraction ``unseen_fraction`` of the codes never occurs in training patients, so a
tokenizer must place a code from what it knows of it (text, graph), not from the label.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from edgesmith.common import Config, EdgesmithError
from edgesmith.common.checks import is_int

PAD = 0
MASK = 1
N_TYPES = 4  # root, chapter, group, code
N_FILLER = 40


@dataclass(frozen=True)
class OntologyConfig(Config):
    """Sizes and probabilities of the synthetic ontology and patient cohort; ``tiny()`` for tests."""

    n_chapters: int = 6
    groups_per_chapter: int = 5
    codes_per_group: int = 6
    n_cooc_edges: int = 240
    p_group_word: float = 0.3
    p_chapter_word: float = 0.5
    desc_len: int = 8
    node_feat_dim: int = 16
    n_siblings: int = 3
    n_cooc: int = 2
    n_risk_groups: int = 6
    seq_len: int = 8
    n_train: int = 1500
    n_test: int = 600
    unseen_fraction: float = 0.5
    label_noise: float = 0.05
    seed: int = 0

    @classmethod
    def tiny(cls, seed: int = 0) -> "OntologyConfig":
        return cls(n_chapters=3, groups_per_chapter=3, codes_per_group=4, n_cooc_edges=40, n_risk_groups=2,
                   n_train=300, n_test=150, seed=seed)

    def validate(self) -> None:
        for name in ("n_chapters", "groups_per_chapter", "codes_per_group", "desc_len", "node_feat_dim",
                     "seq_len", "n_train", "n_test", "n_risk_groups"):
            v = getattr(self, name)
            if not is_int(v, 1):
                self._fail(name, f"is {v!r}", f"use a positive whole number for {name}.")
        for name in ("n_cooc_edges", "n_siblings", "n_cooc"):
            v = getattr(self, name)
            if not is_int(v, 0):
                self._fail(name, f"is {v!r}", f"use a whole number >= 0 for {name}.")
        if self.desc_len < 4:
            self._fail("desc_len", f"is {self.desc_len}", "use at least 4 description tokens.")
        if self.n_risk_groups >= self.n_chapters * self.groups_per_chapter:
            self._fail("n_risk_groups", f"is {self.n_risk_groups} of {self.n_chapters * self.groups_per_chapter} groups",
                       "keep some groups without risk (fewer risk groups).")
        for name in ("p_group_word", "p_chapter_word", "label_noise"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not 0 <= v <= 1:
                self._fail(name, f"is {v!r}", "use a probability between 0 and 1.")
        if not 0 <= self.unseen_fraction < 0.9:
            self._fail("unseen_fraction", f"is {self.unseen_fraction!r}", "use a fraction in [0, 0.9).")

    @property
    def n_codes(self) -> int:
        return self.n_chapters * self.groups_per_chapter * self.codes_per_group

    @property
    def n_graph_nodes(self) -> int:
        return 3 + self.n_siblings + self.n_cooc

    @property
    def node_dim(self) -> int:
        return self.node_feat_dim + N_TYPES

    @property
    def vocab_size(self) -> int:
        n_groups = self.n_chapters * self.groups_per_chapter
        return 2 + self.n_codes + n_groups + self.n_chapters + N_FILLER

    @property
    def per_code(self) -> int:
        """Floats per code in the packed input: text ids, node features, normalised adjacency, node mask."""
        g = self.n_graph_nodes
        return self.desc_len + g * self.node_dim + g * g + g


class Ontology:
    """The generated ontology, descriptions, neighbourhoods and patients for one config."""

    def __init__(self, cfg: OntologyConfig):
        self.cfg = cfg
        rng = np.random.default_rng(cfg.seed)
        c = cfg
        n_groups = c.n_chapters * c.groups_per_chapter
        # node ids: 0 root, then chapters, groups, codes
        self.chapter_node = 1 + np.arange(c.n_chapters)
        self.group_node = 1 + c.n_chapters + np.arange(n_groups)
        self.code_node = 1 + c.n_chapters + n_groups + np.arange(c.n_codes)
        self.n_nodes = 1 + c.n_chapters + n_groups + c.n_codes
        self.group_of_code = np.arange(c.n_codes) // c.codes_per_group
        self.chapter_of_group = np.arange(n_groups) // c.groups_per_chapter
        self.chapter_of_code = self.chapter_of_group[self.group_of_code]
        types = np.zeros(self.n_nodes, np.int64)
        types[self.chapter_node], types[self.group_node], types[self.code_node] = 1, 2, 3
        self.node_features = np.concatenate([rng.normal(size=(self.n_nodes, c.node_feat_dim)),
                                             np.eye(N_TYPES)[types]], axis=1).astype(np.float32)
        self.cooc = self._cooc_edges(rng)
        self.risk_groups = np.sort(rng.choice(n_groups, c.n_risk_groups, replace=False))
        self.descriptions = self._descriptions(rng)
        self.unseen = np.sort(rng.choice(c.n_codes, int(round(c.unseen_fraction * c.n_codes)), replace=False))
        self._parent = {int(self.group_node[gi]): int(self.chapter_node[self.chapter_of_group[gi]])
                        for gi in range(n_groups)}
        self._parent.update({int(self.code_node[ci]): int(self.group_node[self.group_of_code[ci]])
                             for ci in range(c.n_codes)})

    def _cooc_edges(self, rng) -> list[set[int]]:
        c = self.cfg
        nbrs: list[set[int]] = [set() for _ in range(c.n_codes)]
        for _ in range(c.n_cooc_edges):
            a = int(rng.integers(c.n_codes))
            if rng.random() < 0.7:
                same = np.flatnonzero(self.chapter_of_code == self.chapter_of_code[a])
                b = int(rng.choice(same))
            else:
                b = int(rng.integers(c.n_codes))
            if a != b:
                nbrs[a].add(b)
                nbrs[b].add(a)
        return nbrs

    def _descriptions(self, rng) -> np.ndarray:
        c = self.cfg
        n_groups = len(self.group_node)
        code_word = 2 + np.arange(c.n_codes)
        group_word = 2 + c.n_codes + np.arange(n_groups)
        chapter_word = 2 + c.n_codes + n_groups + np.arange(c.n_chapters)
        filler0 = 2 + c.n_codes + n_groups + c.n_chapters
        out = np.full((c.n_codes, c.desc_len), PAD, np.int64)
        for i in range(c.n_codes):
            words = [code_word[i]]
            if rng.random() < c.p_group_word:
                words.append(group_word[self.group_of_code[i]])
            if rng.random() < c.p_chapter_word:
                words.append(chapter_word[self.chapter_of_code[i]])
            n_fill = int(rng.integers(1, c.desc_len - len(words) + 1))
            words += list(filler0 + rng.integers(0, N_FILLER, n_fill))
            rng.shuffle(words)
            out[i, : len(words)] = words
        return out

    @cached_property
    def neighbourhoods(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per code: node features (n_codes, G, node_dim), normalised adjacency (n_codes, G, G), mask (n_codes, G)."""
        c = self.cfg
        g = c.n_graph_nodes
        rng = np.random.default_rng(c.seed + 7)
        feats = np.zeros((c.n_codes, g, c.node_dim), np.float32)
        adjn = np.zeros((c.n_codes, g, g), np.float32)
        mask = np.zeros((c.n_codes, g), np.float32)
        for i in range(c.n_codes):
            grp = self.group_of_code[i]
            sibs = [j for j in range(grp * c.codes_per_group, (grp + 1) * c.codes_per_group) if j != i]
            sibs = list(rng.permutation(sibs)[: c.n_siblings])
            cooc = sorted(self.cooc[i])
            cooc = list(rng.permutation(cooc)[: c.n_cooc]) if cooc else []
            nodes = [self.code_node[i], self.group_node[grp], self.chapter_node[self.chapter_of_code[i]]]
            nodes += [self.code_node[j] for j in sibs] + [self.code_node[j] for j in cooc]
            codes_at = [i, None, None] + sibs + cooc  # code index of each slot, None for group/chapter
            k = len(nodes)
            a = np.zeros((g, g), np.float32)
            for u in range(k):
                for v in range(u + 1, k):
                    if self._linked(nodes[u], nodes[v], codes_at[u], codes_at[v]):
                        a[u, v] = a[v, u] = 1.0
            a[:k, :k] += np.eye(k, dtype=np.float32)
            d = a.sum(1)
            inv = np.where(d > 0, 1.0 / np.sqrt(np.maximum(d, 1e-12)), 0.0)
            adjn[i] = a * inv[:, None] * inv[None, :]
            feats[i, :k] = self.node_features[nodes]
            mask[i, :k] = 1.0
        return feats, adjn, mask

    def _linked(self, nu, nv, cu, cv) -> bool:
        """Tree edges (code-group, group-chapter) and co-occurrence edges between codes."""
        parent = self._parent
        if parent.get(int(nu)) == int(nv) or parent.get(int(nv)) == int(nu):
            return True
        return cu is not None and cv is not None and cv in self.cooc[cu]

    def patients(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """(codes (n, seq_len) int64, labels (n,) int64) for "train" (seen codes only) or "test" (all codes)."""
        c = self.cfg
        if split not in ("train", "test"):
            raise EdgesmithError(f"unknown split {split!r}.", "use 'train' or 'test'.")
        rng = np.random.default_rng([c.seed, 1 if split == "train" else 2])
        n = c.n_train if split == "train" else c.n_test
        allowed = np.ones(c.n_codes, bool)
        if split == "train":
            allowed[self.unseen] = False
        codes = np.empty((n, c.seq_len), np.int64)
        for p in range(n):
            ch = rng.integers(c.n_chapters)
            in_ch = np.flatnonzero(allowed & (self.chapter_of_code == ch))
            pool = np.flatnonzero(allowed)
            for t in range(c.seq_len):
                src = in_ch if (rng.random() < 0.5 and len(in_ch)) else pool
                codes[p, t] = rng.choice(src)
        risky = np.isin(self.group_of_code[codes], self.risk_groups).sum(1) >= 2
        flip = rng.random(n) < c.label_noise
        return codes, (risky ^ flip).astype(np.int64)

    def code_inputs(self) -> np.ndarray:
        """Packed per-code inputs (n_codes, per_code) float32: text ids, node features, adjacency, mask."""
        feats, adjn, mask = self.neighbourhoods
        n = self.cfg.n_codes
        return np.concatenate([self.descriptions.astype(np.float32), feats.reshape(n, -1), adjn.reshape(n, -1),
                               mask], axis=1).astype(np.float32)

    def pack_patients(self, codes: np.ndarray) -> np.ndarray:
        """(n, seq_len) code ids -> (n, seq_len * per_code) float32, the deployed model's input."""
        per = self.code_inputs()
        return np.ascontiguousarray(per[codes].reshape(len(codes), -1))
