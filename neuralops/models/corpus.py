"""The demo's text: a corpus generated from a small grammar (deterministic, nothing downloaded or
shipped), and a character-level tokenizer for it.

The grammar gives a character-level model structure to learn at several scales: spelling, agreement
of subjects and verbs, sentence templates, and sums whose answers follow from the question.
"""

from __future__ import annotations

import random

import torch

_ADJECTIVES = ("small", "old", "quiet", "bright", "heavy", "green", "cold", "gentle", "tall", "rusty", "clever",
               "sleepy", "golden", "narrow", "wild")
_NOUNS = ("fox", "river", "lamp", "garden", "robot", "teacher", "mountain", "cat", "window", "baker", "ship",
          "forest", "engine", "child", "letter", "bridge", "owl", "kettle")
_VERBS = (("sees", "see"), ("finds", "find"), ("follows", "follow"), ("paints", "paint"), ("carries", "carry"),
          ("watches", "watch"), ("builds", "build"), ("remembers", "remember"), ("likes", "like"))
_PLACES = ("near the station", "under the bridge", "in the garden", "by the sea", "on the hill",
           "behind the mill", "at the market", "across the valley")
_TIMES = ("in the morning", "at night", "every day", "after the rain", "before winter", "at noon")
_NUMBERS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
            "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen")


def _noun_phrase(rng: random.Random) -> tuple[str, bool]:
    """A subject or object and whether it is plural."""
    plural = rng.random() < 0.3
    noun = rng.choice(_NOUNS)
    adjective = rng.choice(_ADJECTIVES) if rng.random() < 0.6 else ""
    if plural:
        noun = "children" if noun == "child" else noun + ("es" if noun.endswith(("x", "s", "ch")) else "s")
        det = rng.choice(("the", "two", "some", "many"))
    else:
        det = rng.choice(("the", "a", "one"))
        if det == "a" and (adjective or noun)[0] in "aeiou":
            det = "an"
    return " ".join(w for w in (det, adjective, noun) if w), plural


def _sentence(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.2:
        a, b = rng.randrange(10), rng.randrange(9)
        return f"{_NUMBERS[a].capitalize()} plus {_NUMBERS[b]} is {_NUMBERS[a + b]}."
    subject, plural = _noun_phrase(rng)
    verb = rng.choice(_VERBS)[1 if plural else 0]
    obj, _ = _noun_phrase(rng)
    text = f"{subject} {verb} {obj}"
    if rng.random() < 0.5:
        text += " " + rng.choice(_PLACES)
    if rng.random() < 0.3:
        text += " " + rng.choice(_TIMES)
    if kind > 0.85:
        other, other_plural = _noun_phrase(rng)
        text += f", and {other} {'do' if other_plural else 'does'} not"
    return text[0].upper() + text[1:] + "."


def generate_corpus(num_chars: int = 200_000, seed: int = 0) -> str:
    """About ``num_chars`` characters of generated sentences, a few to a line; the same for a seed."""
    rng = random.Random(seed)
    lines, total = [], 0
    while total < num_chars:
        line = " ".join(_sentence(rng) for _ in range(rng.randint(2, 4)))
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines) + "\n"


class CharTokenizer:
    """Characters to ids and back, over the characters of a text (sorted, so the ids are stable)."""

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self._ids = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """``[len(text)]`` int64 ids; a character outside the vocabulary raises ``ValueError``."""
        try:
            return torch.tensor([self._ids[c] for c in text], dtype=torch.long)
        except KeyError as e:
            raise ValueError(f"CharTokenizer: character {e.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)
