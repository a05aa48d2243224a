"""How often a loaded model answers the built-in thinking model's problems right, thinking or not.

`score(model, problems, thinking)` generates greedily through `generate` (the runtime every run uses), one problem
at a time from the chat text the model's template renders (`arithmetic.prompt_text`), and marks each answer read
back after the think span. The training script records its figures with this very function, so a test can
reproduce them exactly. It does not load models or draw problems: the caller hands both in.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from app.core.decoding.generation import generate
from app.core.events import Finished, Request, Step
from app.core.models.arithmetic import Problem, prompt_text, read_answer
from app.core.settings import SamplerSettings
from backends.base import LoadedModel, LoadOptions

MAX_TOKENS = 96  # the longest think trace (three-digit operands, a final carry) with its answer takes ~50
EVAL_OPTIONS = LoadOptions(device="cpu", dtype="float32")  # how the recorded figures were measured (MLX: its default)


@dataclass(frozen=True)
class Marks:
    """What the model answered to each problem, greedy, with thinking on or off."""

    thinking: bool
    problems: tuple[Problem, ...]
    answers: tuple[str, ...]

    @property
    def correct(self) -> int:
        return sum(a == p.answer for p, a in zip(self.problems, self.answers, strict=True))

    @property
    def accuracy(self) -> float:
        return self.correct / len(self.problems) if self.problems else 0.0


def completion(model: LoadedModel, problem: Problem, thinking: bool, max_tokens: int = MAX_TOKENS) -> str:
    """What the model writes after the prompt, greedy, up to its end of turn (or `max_tokens`)."""
    ids = model.tokenizer.encode(prompt_text(problem.question, thinking), add_special_tokens=False)
    settings = SamplerSettings(temperature=0.0, max_tokens=max_tokens, seed=0)
    request = Request(prompt_ids=tuple(ids), settings=settings, record=False)
    drawn: list[int] = []
    for event in generate(model, request, threading.Event()):
        if isinstance(event, Step):
            drawn.append(event.token_id)
        elif isinstance(event, Finished) and event.reason == "error":
            raise RuntimeError(event.message)
    return model.tokenizer.decode(drawn)


def score(model: LoadedModel, problems: Sequence[Problem], thinking: bool, max_tokens: int = MAX_TOKENS) -> Marks:
    answers = tuple(read_answer(completion(model, p, thinking, max_tokens)) for p in problems)
    return Marks(thinking, tuple(problems), answers)
