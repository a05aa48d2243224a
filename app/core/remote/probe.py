"""What an OpenAI-compatible server really applies of what Logit Lab sends it: `probe` runs the table of checks
(`CHECKS`: one row each, naming the fields it tests, what it sends, how it judges and how sure it is) against one
served model and returns a `Report`: a verdict per check, the fields the server ignores or refuses, and whether the
log-probabilities it reports are the model's or the sampled distribution's. Every request is counted against a
budget and bounded in time by the transport; a statistical verdict is wrong with chance at most `alpha`. It changes
nothing on the server, holds no thread, and prints nothing (`app/cli/probe.py` shows the report).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from app.core.models.sources import BUILTIN_PATH, ModelSpec, is_builtin
from app.core.remote import probe_checks as checks
from app.core.remote import probe_stats as stats
from app.core.remote.probe_session import PROMPTS, Finding, Session, Spent
from app.core.remote.probe_stats import ALPHA, BUDGET, DEADLINE_S, MIN_BUDGET
from app.core.remote.remote_run import dialect, learn_vocabulary, load_remote
from backends.remote.backend import RemoteError, RemoteModel, where

FIXED = 16  # requests the checks without draws may take (the draws share the rest)
VERDICTS = ("honoured", "ignored", "refused", "differs", "inconclusive", "untested", "error", "raw", "after sampling")


@dataclass(frozen=True)
class Check:
    """One row of the probe: the request fields it tests, what it sends, how it judges, how sure it is, the
    function that runs it, and the checks that must be honoured first."""

    name: str
    fields: tuple[str, ...]
    sends: str
    judges: str
    confidence: str
    run: Callable[[Session], Finding]
    needs: tuple[str, ...] = ()


DRAWS = "exact when a draw leaves the kept set; else false alarm ≤ alpha (binomial)"
VS_GREEDY = "exact, given that temperature 0 is deterministic (checked first)"
CHECKS = (
    Check("log-probs", ("logprobs",), "temperature 0.5 and top_k 2, one token",
          "the reported top list against the reference: unchanged (raw), gaps ×2 (temperature) or renormalised "
          "(filters) = after sampling", "exact (±0.05 nats)", checks.logprobs_kind),
    Check("temperature=0", ("temperature",), "temperature 0, 16 tokens, twice with different seeds",
          "the likeliest token first, both runs equal", "exact", checks.greedy),
    Check("top_k", ("top_k",), "top_k 1 at temperature 1, one token a request",
          "every draw is the likeliest token", DRAWS, checks.top_k),
    Check("top_p", ("top_p",), "top_p halfway into the second token's mass, at temperature 1",
          "every draw is one of the top two", DRAWS, checks.top_p),
    Check("min_p", ("min_p",), "min_p in the first clear gap between listed tokens, at temperature 1",
          "every draw is above the gap", DRAWS, checks.min_p),
    Check("temperature", ("temperature",), "temperature 0.5 or 2, one token a request",
          "sequential likelihood ratio of the draws (among the listed tokens) at that temperature against 1",
          "false alarm ≤ alpha (Ville's inequality)", checks.temperature),
    Check("seed", ("seed",), "one seed twice at temperature 1, 8 tokens",
          "equal runs, which an unseeded server repeats with chance ≤ alpha", "exact when they differ; else "
          "false alarm ≤ alpha", checks.seed),
    Check("stop", ("stop",), "the temperature-0 run with a later token's text as stop string",
          "the text ends before it", VS_GREEDY, checks.stop, ("temperature=0",)),
    Check("logit_bias", ("logit_bias",), "temperature 0, the likeliest token -100, the third +100",
          "the third is drawn", VS_GREEDY, checks.logit_bias, ("temperature=0",)),
    *(Check(f, (f,), f"the temperature-0 run with {f} {v:g}", "the run changes; unchanged where a repeated token "
            "led by less than the penalty = ignored", VS_GREEDY, checks.penalty(f), ("temperature=0",))
      for f, v in checks.PENALTIES.items()),
    Check("n", ("n",), "n 3, answered whole", "three choices", "exact", checks.n),
    Check("echo", ("echo",), "echo on /completions, with log-probabilities", "the text begins with the prompt "
          "(and whether the prompt's log-probabilities come too)", "exact", checks.echo),
    Check("top_logprobs", ("top_logprobs",), "3 candidates a step", "3 come back (or 3 and the drawn token)",
          "exact", checks.top_logprobs),
)


@dataclass(frozen=True)
class Verdict:
    """What one check found."""

    check: str
    fields: tuple[str, ...]
    sent: str
    verdict: str  # one of VERDICTS
    detail: str
    confidence: str
    requests: int
    judges: str  # how the check judges (its row's)


@dataclass(frozen=True)
class Report:
    """A server's report card: each check's verdict, and who, where, when and under which bounds."""

    server: str
    model: str
    dialect: str
    prompt: str
    alpha: float
    budget: int
    requests: int
    date: str
    verdicts: tuple[Verdict, ...]
    fingerprint: str | None = None

    def fields(self, verdict: str) -> list[str]:
        """The request fields of the checks with this verdict."""
        return sorted({f for v in self.verdicts if v.verdict == verdict for f in v.fields})

    @property
    def ignored(self) -> list[str]:
        return self.fields("ignored")

    @property
    def logprobs(self) -> str:
        """The log-probs check's verdict: raw (the model's), after sampling, or another where it could not tell."""
        return next(v.verdict for v in self.verdicts if v.check == "log-probs")

    def to_dict(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k != "verdicts"}, "ignored": self.ignored,
                "refused": self.fields("refused"), "logprobs": self.logprobs,
                "checks": [asdict(v) for v in self.verdicts]}


def connect(base_url: str, model: str = "", api_key_env: str | None = None, deadline: float = DEADLINE_S,
            tokenizer: str | None = None) -> RemoteModel:
    """The served model to probe ("": the one the server serves), each request held to `deadline` seconds; the
    model's token ids read from `tokenizer` (a folder holding its tokenizer.json; "builtin": the built-in model's)
    where the server names none (logit_bias needs them)."""
    spec = ModelSpec(source=model, backend="remote", base_url=base_url, api_key_env=api_key_env, deadline=deadline)
    served = load_remote(spec, timeout=min(deadline, 30.0))
    if tokenizer:
        learn_vocabulary(served, str(BUILTIN_PATH) if is_builtin(tokenizer) else tokenizer)
    return served


def probe(model: RemoteModel, *, budget: int = BUDGET, alpha: float = ALPHA, seed: int = 0,
          prompts: Sequence[str] = PROMPTS) -> Report:
    """Run every check of CHECKS on `model` (a connected server model), at most `budget` requests in all; seeds from
    `seed` + 1 on. A server that reports no log-probabilities is a RemoteError: there is nothing to judge by."""
    if budget < MIN_BUDGET:
        raise ValueError(f"a probe needs a budget of at least {MIN_BUDGET} requests, got {budget}")
    s = Session(model, budget, alpha, seed)
    s.choose_reference(prompts)
    plan(s)
    verdicts = tuple(_run(s, row) for row in CHECKS)
    return Report(where(model.base_url), model.model, dialect(model).name, s.prompt, alpha, budget, s.used,
                  datetime.date.today().isoformat(), verdicts, s.fingerprint)


def plan(s: Session) -> None:
    """How many draws each drawing check may make: the filters what they need to decide (from the reference), out
    of what the budget leaves after the checks without draws (shared in proportion when it is short); the
    sequential temperature test the rest, at most four times its expected count."""
    ref, free = s.ref, max(0, s.budget - s.used - FIXED)
    need = {name: stats.draws_needed(ref.prob(kept) / ref.mass, s.alpha) or 0
            for name, (_, kept) in checks.cuts(ref).items()}
    total = sum(need.values())
    s.caps = need if total <= free * 3 // 4 else {k: v * free * 3 // 4 // total for k, v in need.items()}
    expected = min(stats.temperature_draws(ref.logprobs, t, s.alpha) for t in checks.TEMPERATURES)
    rest = free - sum(s.caps.values())
    s.caps["temperature"] = min(rest, 4 * math.ceil(expected)) if math.isfinite(expected) else rest


def _run(s: Session, row: Check) -> Verdict:
    before = s.used
    f = _finding(s, row)
    s.found[row.name] = f.verdict
    return Verdict(row.name, row.fields, f.sent or row.sends, f.verdict, f.detail, f.confidence, s.used - before,
                   row.judges)


def _finding(s: Session, row: Check) -> Finding:
    """The row's finding; a check that cannot run (a check it needs failed, the server is gone) is untested."""
    missing = [n for n in row.needs if s.found.get(n) != "honoured"]
    if s.gone or missing:
        was = s.found.get(missing[0], "not run") if missing else ""
        why = "the server stopped answering" if s.gone else f"needs {missing[0]} honoured (it was {was})"
        return Finding("untested", why, confidence="")
    try:
        found = row.run(s)
        s.failed = 0
        return found
    except Spent:
        return Finding("inconclusive", "the request budget ran out (--budget)", confidence="")
    except RemoteError as e:
        refused = e.status == 400 or "(HTTP 400)" in str(e)
        # no connection, or two checks in a row without an answer (time limits): the later checks are not run
        s.failed = s.failed + 1 if e.status is None and not refused else 0
        s.gone = e.unreachable or s.failed >= 2
        return Finding("refused" if refused else "error", str(e), confidence="")
