"""What more thinking buys the built-in thinking model: its accuracy on the first N held-out sums (greedy) with no
think budget, under hard budgets and under soft ones, and with thinking off (the chat template's enable_thinking=False,
as the window's Think box and --no-think ask), through Logit Lab's own `generate` (torch, float32, CPU), each problem
a chat of one user turn. Baseline: no budget, measured in the same run. Prints a Markdown table (docs/thinking.md
keeps one).

    python benchmarks/think_budget.py [--problems 100] [--budgets 32,24,16,8] [--soft 24,16,8]
"""

from __future__ import annotations

import argparse
import threading

from app.core.decoding.generation import generate
from app.core.events import Finished, Message, Request
from app.core.models.arithmetic import held_out, read_answer
from app.core.models.sources import BUILTIN_THINKING_PATH
from app.core.settings import SamplerSettings
from backends import get_backend
from backends.base import LoadOptions


def run(model, question: str, budget: int, soft: bool, think: bool = True):
    s = SamplerSettings(temperature=0.0, max_tokens=96, seed=0, think_budget=budget, think_soft=soft, think=think)
    events = generate(model, Request(messages=(Message("user", question),), settings=s), threading.Event())
    return next(e for e in events if isinstance(e, Finished)).trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=100)
    ap.add_argument("--budgets", default="32,24,16,8")
    ap.add_argument("--soft", default="24,16,8")
    args = ap.parse_args()
    model = get_backend("torch").load(BUILTIN_THINKING_PATH, LoadOptions(device="cpu", dtype="float32"))
    problems = held_out()[: args.problems]
    n = len(problems)
    print(f"first {n} held-out sums, greedy, torch float32 on a CPU\n")
    print("| budget | mode | right | of the baseline | think-span tokens (mean) | runs the budget cut |")
    print("|---|---|---|---|---|---|")
    configs = [(0, False, True)] + [(int(b), False, True) for b in args.budgets.split(",") if b] + \
              [(int(b), True, True) for b in args.soft.split(",") if b] + [(0, False, False)]
    base = None
    for budget, soft, thinking in configs:
        right = think = cut = 0
        for p in problems:
            trace = run(model, p.question, budget, soft, thinking)
            right += read_answer(model.tokenizer.decode(trace.token_ids)) == p.answer
            think += sum(st.span == "think" for st in trace.steps)
            cut += any(st.forced == "budget" for st in trace.steps)
        base = right if base is None else base
        mode = "soft" if soft else "hard" if budget else "none" if thinking else "thinking off"
        print(f"| {budget or 'off'} | {mode} | {right}/{n} | {right / base:.2f}× | {think / n:.1f} | {cut} |")


if __name__ == "__main__":
    main()
