"""The built-in thinking model's task: addition problems, their think traces and the chat text around them.

One definition for the training script (`packaging/train_thinking_model.py`) and the accuracy check
(`app.core.decoding.accuracy`): the problems a seed draws, the fixed held-out set training never sees, the text
the chat template renders with thinking on or off, and how an answer is read back. Plain Python, no framework.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
EMPTY_THINK = f"{THINK_OPEN}\n\n{THINK_CLOSE}\n\n"  # what the template appends with enable_thinking=False (Qwen3's)
DIGITS = (1, 2, 3)  # how many digits an operand has
DIGIT_WEIGHTS = (1, 2, 5)  # mostly three-digit operands: where thinking pays
HELD_OUT_SEED = 36  # the held-out set's own seed (issue 36), apart from any training seed
HELD_OUT_SIZE = 400


@dataclass(frozen=True)
class Problem:
    a: int
    b: int

    @property
    def question(self) -> str:
        return f"{self.a}+{self.b}"

    @property
    def answer(self) -> str:
        return str(self.a + self.b)


def trace(p: Problem) -> list[str]:
    """The think trace, one line per column from the units up: the column's sum with the carry it takes, the
    carry it gives, and the answer's digits so far ("7+8=15, carry 1: 5", "4+3+1=8: 85")."""
    a, b = str(p.a)[::-1], str(p.b)[::-1]
    lines, carry, done = [], 0, ""
    for i in range(max(len(a), len(b))):
        x, y = int(a[i]) if i < len(a) else 0, int(b[i]) if i < len(b) else 0
        s = x + y + carry
        done = str(s % 10) + done
        lines.append(f"{x}+{y}{'+1' if carry else ''}={s}{', carry 1' if s >= 10 else ''}: {done}")
        carry = s // 10
    if carry:
        lines.append(f"carry 1: 1{done}")
    return lines


def prompt_text(question: str, thinking: bool) -> str:
    """What the model's chat template renders for one user turn and the assistant's turn to come
    (`enable_thinking=False`: the empty think span is already closed, as Qwen3's template does)."""
    head = f"{IM_START}user\n{question}{IM_END}\n{IM_START}assistant\n"
    return head if thinking else head + EMPTY_THINK


def think_span(lines: list[str]) -> str:
    """The think span as the model writes it, with its closing marker and the blank line before the answer."""
    return f"{THINK_OPEN}\n" + "".join(line + "\n" for line in lines) + f"{THINK_CLOSE}\n\n"


def read_answer(completion: str) -> str:
    """The answer in what the model wrote after the prompt: the text after the last closing think marker (all of it
    where there is none), up to the end of its turn, stripped."""
    return completion.rsplit(THINK_CLOSE, 1)[-1].split(IM_END, 1)[0].strip()


def draw(rng: random.Random) -> Problem:
    """One problem: each operand's digit count by `DIGIT_WEIGHTS`, its digits uniform (no leading zero)."""
    def operand() -> int:
        n = rng.choices(DIGITS, DIGIT_WEIGHTS)[0]
        return rng.randrange(10 ** (n - 1) if n > 1 else 0, 10**n)
    return Problem(operand(), operand())


def draw_for_training(rng: random.Random) -> Problem:
    """One problem as `draw` makes them, drawn again until it is not in the held-out set."""
    while (p := draw(rng)) in held_out_set():
        pass
    return p


@cache
def held_out_set() -> frozenset[Problem]:
    return frozenset(held_out())


@cache
def held_out() -> tuple[Problem, ...]:
    """The fixed held-out set: `HELD_OUT_SIZE` distinct problems drawn with `HELD_OUT_SEED`; training skips them."""
    rng, seen = random.Random(HELD_OUT_SEED), dict[Problem, None]()
    while len(seen) < HELD_OUT_SIZE:
        seen.setdefault(draw(rng))
    return tuple(seen)
