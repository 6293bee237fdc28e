"""A synthetic world of facts and question-answer text about it, as byte tokens for the RWKV models.

Entities get made-up names (syllables drawn with the world's seed); each has one value per
attribute. The language model is fine-tuned on *true* statements only, in two templates ("Q: color
of Zorika? A: green." and "Zorika's color is green."), so whatever it learns about truth comes from
memorising the facts. A share of the text is *judged*: statements about a separate set of "judge"
entities, true or false, followed by a verdict (" Right." / " Wrong."), the kind of evaluative text
that gives a pretrained LLM's latent space a sense of truth. Detection data never use the judge
entities, so no verdict about any detection fact is ever seen: the LM must generalise the
comparison "answer vs memorised fact" from the judge entities to the others.
Detection data: for every (entity, attribute, template) one truthful response
and one hallucinated one (another value of the same attribute), so the label is exact by
construction and the two classes differ only in the answer. (The paper labels an LLM's own sampled
answers with a judge model; here the responses are built so the label needs no judge.)

Every sequence is packed to one fixed length by padding on the LEFT with newlines, the separator
the fine-tuning text puts between lines, so the last token of every row is the answer's final "."
and the recurrent model reads padding it has seen in training.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgesmith.common import EdgesmithError
from edgesmith.models.papers.ood.config import Config

ATTRIBUTES = {
    "color": ("red", "blue", "green", "black", "white", "pink", "gold", "gray"),
    "city": ("Oslo", "Lima", "Rome", "Pune", "Kiev", "Baku", "Doha", "Bern"),
    "food": ("rice", "figs", "soup", "eggs", "corn", "kale", "nuts", "fish"),
}
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u")
PAD = "\n"


@dataclass(frozen=True)
class WorldConfig(Config):
    n_entities: int = 40
    n_judge_entities: int = 12  # entities whose statements come with verdicts (never detection data)
    seq_len: int = 40  # packed length of one QA row (bytes)

    def validate(self) -> None:
        self._need_int("n_entities", 4, 2000)
        self._need_int("n_judge_entities", 1, self.n_entities - 2)
        self._need_int("seq_len", 24, 512)


@dataclass
class World:
    entities: list[str]
    facts: dict[tuple[str, str], str]  # (entity, attribute) -> value
    judge_entities: tuple[str, ...] = ()

    def pairs(self) -> list[tuple[str, str]]:
        return sorted(self.facts)

    def detection_pairs(self) -> list[tuple[str, str]]:
        return [p for p in self.pairs() if p[0] not in self.judge_entities]

    def judge_pairs(self) -> list[tuple[str, str]]:
        return [p for p in self.pairs() if p[0] in self.judge_entities]


def make_world(cfg: WorldConfig, seed: int) -> World:
    """Distinct made-up entity names and one random value per (entity, attribute)."""
    rng = np.random.default_rng(seed)
    names: list[str] = []
    seen = set()
    while len(names) < cfg.n_entities:
        sylls = rng.integers(0, len(_ONSETS), 3), rng.integers(0, len(_VOWELS), 3)
        name = "".join(_ONSETS[o] + _VOWELS[v] for o, v in zip(*sylls)).capitalize()
        if name not in seen:
            seen.add(name), names.append(name)
    facts = {(e, a): vals[int(rng.integers(0, len(vals)))] for e in names for a, vals in ATTRIBUTES.items()}
    return World(names, facts, tuple(names[: cfg.n_judge_entities]))


TEMPLATES = ("Q: {a} of {e}? A: {v}.", "{e}'s {a} is {v}.")


def qa_line(entity: str, attribute: str, value: str, template: int = 0) -> str:
    return TEMPLATES[template].format(e=entity, a=attribute, v=value)


VERDICTS = (" Wrong.", " Right.")


def corpus(world: World, n_lines: int, rng: np.random.Generator, judged_fraction: float = 0.3) -> np.ndarray:
    """The fine-tuning text, ``n_lines`` newline-separated lines: true statements about every fact, and
    (a ``judged_fraction`` of lines) statements about judge entities, true or false with equal odds,
    followed by their verdict."""
    pairs, judged = world.pairs(), world.judge_pairs()
    lines = []
    for _ in range(n_lines):
        t = int(rng.integers(0, len(TEMPLATES)))
        if judged and rng.random() < judged_fraction:
            e, a = judged[int(rng.integers(0, len(judged)))]
            truth = world.facts[(e, a)]
            ok = bool(rng.random() < 0.5)
            wrong = [v for v in ATTRIBUTES[a] if v != truth]
            value = truth if ok else wrong[int(rng.integers(0, len(wrong)))]
            lines.append(qa_line(e, a, value, t) + VERDICTS[ok])
        else:
            e, a = pairs[int(rng.integers(0, len(pairs)))]
            lines.append(qa_line(e, a, world.facts[(e, a)], t))
    text = "".join(PAD + line for line in lines)
    return np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int64)


def qa_examples(world: World, pairs: list[tuple[str, str]], rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    """Per pair and template: the truthful response and one hallucinated one (a random other value).

    Labels: 1 = truthful, 0 = hallucinated.
    """
    texts, labels = [], []
    for e, a in pairs:
        truth = world.facts[(e, a)]
        wrong = [v for v in ATTRIBUTES[a] if v != truth]
        for t in range(len(TEMPLATES)):
            texts.append(qa_line(e, a, truth, t)), labels.append(1)
            texts.append(qa_line(e, a, wrong[int(rng.integers(0, len(wrong)))], t)), labels.append(0)
    return texts, np.asarray(labels, dtype=np.int64)


def pack(texts: list[str], seq_len: int) -> np.ndarray:
    """(n, seq_len) int64 byte tokens, each text right-aligned after newline padding."""
    out = np.full((len(texts), seq_len), ord(PAD), dtype=np.int64)
    for i, t in enumerate(texts):
        b = np.frombuffer(t.encode(), dtype=np.uint8)
        if len(b) > seq_len:
            raise EdgesmithError(f"a QA text has {len(b)} bytes, more than the packed length {seq_len}.",
                                 "raise WorldConfig.seq_len.")
        out[i, seq_len - len(b):] = b
    return out
