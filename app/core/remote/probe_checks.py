"""The server probe's checks, one function each (`probe.CHECKS` is their table): each sends a few requests through a
`Session` and judges what came back against the server's own reported log-probabilities (the session's reference),
returning a `Finding`. Filters are tested at temperature 1 by draws that must stay inside the set they keep;
temperature by a likelihood ratio; deterministic rules (greedy, stop, bias, penalties, n, echo) exactly, against
the temperature-0 run. They hold no state of their own and never raise for what a server does (only `Spent`,
`RemoteError`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

from app.core.remote import probe_stats as stats
from app.core.remote.probe_session import NEUTRAL, TOL, Dist, Finding, Reply, Session
from app.core.settings import MAX_BIAS, SamplerSettings

RUN = 16  # tokens of the temperature-0 run (it repeats a token within them on most models)
SEED_RUN = 8  # tokens of each seeded run
TEMPERATURES = (0.5, 2.0)  # the temperature test takes whichever the reference tells apart from 1 soonest
PENALTIES = {"repetition_penalty": 2.0, "frequency_penalty": 2.0, "presence_penalty": 2.0}
ASKED_TOP = 3  # candidates the top_logprobs check asks for


def _bound(s: Session) -> str:
    return f"false alarm ≤ {s.alpha:g}"


def _texts(texts: list[str] | tuple[str, ...], n: int = 3) -> str:
    return ", ".join(repr(t) for t in texts[:n]) + (", …" if len(texts) > n else "")


# log-probabilities ---------------------------------------------------------------------------------------------
def logprobs_kind(s: Session) -> Finding:
    """Asked at temperature 0.5 with top-k 2: the model's own numbers come back unchanged, a sampled distribution's
    come back with their gaps doubled (temperature) or renormalised over two tokens (top-k)."""
    t, ref = 0.5, s.ref
    far = next((i for i in range(1, len(ref)) if ref.logprobs[0] - ref.logprobs[i] >= 0.3), None)
    sent = "temperature=0.5, top_k=2"
    if far is None:
        return Finding("inconclusive", "the listed tokens are too close to tell a temperature apart", sent=sent)
    got = Dist.of(s.ask(NEUTRAL.with_(temperature=t, top_k=2), top_n=len(ref)).first)
    a, b = ref.ids[0], ref.ids[far]
    if got.lp(a) is None:
        return Finding("after sampling", f"the likeliest token {ref.texts[0]!r} is missing from the reported list",
                       sent=sent)
    seen = []
    if len(got) <= 2 < len(ref) or (got.lp(b) is not None and math.exp(got.lp(a)) + math.exp(got.lp(b)) > 1 - TOL):
        seen.append(f"renormalised over {len(got)} tokens (top-k applied)")
    if got.lp(b) is not None:
        ratio = (got.lp(a) - got.lp(b)) / (ref.logprobs[0] - ref.logprobs[far])
        if abs(ratio - 1 / t) < abs(ratio - 1):
            seen.append(f"gaps ×{ratio:.2f} (temperature applied)")
    if not seen and abs(got.lp(a) - ref.logprobs[0]) > TOL:
        seen.append(f"the likeliest token's moved from {ref.logprobs[0]:.3f} to {got.lp(a):.3f}")
    if seen:
        return Finding("after sampling", "; ".join(seen), sent=sent)
    return Finding("raw", f"the same numbers as at temperature 1 (top {got.lp(a):.3f} vs {ref.logprobs[0]:.3f}): "
                   "the model's distribution, before temperature and filters", confidence=f"exact (±{TOL:g} nats)",
                   sent=sent)


# temperature 0 -------------------------------------------------------------------------------------------------
def greedy(s: Session) -> Finding:
    """Two temperature-0 runs with different seeds: both draw the likeliest token first and agree throughout."""
    runs = [s.ask(NEUTRAL.with_(temperature=0.0, max_tokens=RUN)) for _ in range(2)]
    s.greedy = runs[0]
    sent = f"temperature=0, {RUN} tokens, 2 seeds"
    first = runs[0].drawn
    if first is None:
        return Finding("inconclusive", "the first token has no visible text", sent=sent)
    if first.id not in s.ref.near(0):
        return Finding("ignored", f"drew {first.text!r}, not the likeliest {s.ref.texts[0]!r}", sent=sent)
    k = _first_difference(runs[0], runs[1])
    if k is not None:
        return Finding("differs", f"two runs differ at token {k + 1}: temperature 0 is not deterministic", sent=sent)
    return Finding("honoured", f"both runs drew the likeliest token first and agree for {len(runs[0].tokens)} tokens",
                   sent=sent)


def _first_difference(a: Reply, b: Reply) -> int | None:
    """Where two runs' tokens first differ (one ending early differs where it ends); None: they are equal."""
    if a.ids == b.ids:
        return None
    pairs = enumerate(zip(a.ids, b.ids, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a.ids), len(b.ids)))


# filters: draws that must stay in the kept set ------------------------------------------------------------------
def _kept(s: Session, name: str, settings: SamplerSettings, kept: set[int], sent: str) -> Finding:
    """Draws at `settings` until a server ignoring them would have strayed outside `kept` with chance <= alpha
    (their chance inside counted among the listed tokens only, so that a server silently cutting away the tokens
    outside the list is covered too). A draw that is not a kept token's plain text is outside."""
    p_kept = s.ref.prob(kept) / s.ref.mass
    need = stats.draws_needed(p_kept, s.alpha)
    if need is None:
        return Finding("inconclusive", "the kept set holds every listed token", sent=sent)
    inside, outside = 0, Counter[str]()
    for _ in range(min(need, s.caps.get(name, need))):
        tok = s.draw(settings)
        if tok is not None and tok.id in kept:
            inside += 1
        else:
            outside["(no plain text)" if tok is None else tok.text] += 1
    n, out = inside + sum(outside.values()), sum(outside.values())
    verdict = stats.kept_verdict(inside, out, p_kept, s.alpha)
    kept_texts = [t for i, t in zip(s.ref.ids, s.ref.texts, strict=True) if i in kept]
    detail = f"{out} of {n} draws outside the {len(kept)} kept ({_texts(kept_texts)})"
    detail += f", e.g. {outside.most_common(1)[0][0]!r}" if out else f"; ignoring it keeps them in with p={p_kept:.2f}"
    conf = "exact (a draw outside)" if verdict == "ignored" else _bound(s)
    return Finding(verdict, detail, conf, f"{sent} ×{n}")


def cuts(ref: Dist) -> dict[str, tuple[float, set[int]]]:
    """Each filter's value for the reference and the tokens it keeps there: top_k 1 (the likeliest, and any tied
    with it); top_p halfway into the second token's mass (the top two, and any tied with the second); min_p at the
    geometric middle of the first clear gap between two listed tokens (those above it). A filter the reference
    cannot place, or whose kept tokens are not plain text, is left out."""
    out: dict[str, tuple[float, set[int]]] = {"top_k": (1, ref.near(0))}
    j = 2 if len(ref) >= 3 else 1
    out["top_p"] = (round(ref.prob(set(ref.ids[: j - 1])) + math.exp(ref.logprobs[j - 1]) / 2, 6),
                    set(ref.ids[:j]) | ref.near(j - 1))
    j = next((j for j in range(1, len(ref)) if ref.logprobs[j - 1] - ref.logprobs[j] >= 3 * TOL), 0)
    if j:
        out["min_p"] = (round(math.exp((ref.logprobs[j - 1] + ref.logprobs[j]) / 2 - ref.logprobs[0]), 6),
                        set(ref.ids[:j]))
    return {name: cut for name, cut in out.items() if ref.plain(cut[1])}


def _filter(name: str) -> Callable[[Session], Finding]:
    def check(s: Session) -> Finding:
        cut = cuts(s.ref).get(name)
        if cut is None:
            return Finding("inconclusive", "the listed tokens leave no clear place to set it (or what it would keep "
                           "is not plain text)")
        value, kept = cut
        return _kept(s, name, NEUTRAL.with_(**{name: value}), kept, f"{name}={value:g}")

    check.__name__ = name
    return check


top_k, top_p, min_p = _filter("top_k"), _filter("top_p"), _filter("min_p")


# temperature: a likelihood ratio -------------------------------------------------------------------------------
def temperature(s: Session) -> Finding:
    """Draws at temperature t, each of a listed token of plain text scored as t's distribution over those tokens
    against 1's (the temperature ignored), until one is likelier by 1/alpha; draws of other tokens are set aside."""
    plain = [i for i in range(len(s.ref)) if s.ref.plain({s.ref.ids[i]})]
    lps = [s.ref.logprobs[i] for i in plain]
    if len(lps) < 2:
        return Finding("inconclusive", "fewer than two listed tokens of plain text")
    t = min(TEMPERATURES, key=lambda x: stats.temperature_draws(lps, x, s.alpha))
    test = stats.RatioTest(stats.conditional(lps, t), stats.conditional(lps, 1.0), s.alpha)
    n, cap, slot = 0, s.caps.get("temperature", 200), {s.ref.ids[i]: k for k, i in enumerate(plain)}
    while test.decided is None and n < cap:
        tok = s.draw(NEUTRAL.with_(temperature=t))
        n += 1
        if tok is not None and tok.id in slot:
            test.add(slot[tok.id])
    guess = stats.estimate_temperature(test.counts, lps)
    verdict = {"a": "honoured", "b": "ignored", None: "inconclusive"}[test.decided]
    detail = f"{sum(test.counts)} of {n} draws among the {len(lps)} listed tokens of plain text"
    detail += f"; the likeliest temperature for them {guess:.2g}" if guess is not None else ""
    return Finding(verdict, detail, _bound(s), f"temperature={t:g} ×{n}")


# seed ------------------------------------------------------------------------------------------------------------
def seed(s: Session) -> Finding:
    """Two runs with one seed at temperature 1: equal, where an unseeded server would repeat the first with chance
    <= alpha (the product of its tokens' reported probabilities)."""
    fixed = NEUTRAL.with_(max_tokens=SEED_RUN, seed=s.new_seed())
    a, b = s.ask(fixed, top_n=len(s.ref)), s.ask(fixed, top_n=len(s.ref))
    sent = f"seed={fixed.seed}, {SEED_RUN} tokens, twice"
    k = _first_difference(a, b)
    if k is not None:
        return Finding("ignored", f"two runs with one seed differ at token {k + 1}", sent=sent)
    drawn = [t.logprob if t.logprob is not None else min((c.logprob for c in t.top), default=0.0) for t in a.tokens]
    chance = stats.chance_again(drawn)
    detail = f"two runs drew the same {len(a.tokens)} tokens; unseeded, with chance {chance:.1e}"
    return Finding("honoured" if chance <= s.alpha else "inconclusive", detail, _bound(s), sent)


# deterministic rules, against the temperature-0 run ------------------------------------------------------------
def stop(s: Session) -> Finding:
    """The temperature-0 run again, with one of its later tokens' text as a stop string: it ends before it."""
    run = s.greedy
    pick = next((j for j in range(1, len(run.tokens)) if run.tokens[j].text.strip()
                 and run.tokens[j].text not in "".join(t.text for t in run.tokens[:j])
                 and "".join(t.text for t in run.tokens[:j]).strip()), None)
    if pick is None:
        return Finding("inconclusive", "the temperature-0 run has no later token to stop at")
    word, before = run.tokens[pick].text, "".join(t.text for t in run.tokens[:pick])
    got = s.ask(NEUTRAL.with_(temperature=0.0, max_tokens=RUN, stop=(word,)), top_n=1).text
    sent = f"stop={word!r}, temperature=0"
    if got.rstrip() == before.rstrip():
        return Finding("honoured", f"ended before {word!r}, after {len(before)} characters", sent=sent)
    if got == before + word:
        return Finding("honoured", f"ended at {word!r} (its token reported with the rest)", sent=sent)
    if got.startswith(before + word):
        return Finding("ignored", f"went on past {word!r}", sent=sent)
    return Finding("differs", f"answered {got[:40]!r}, expected {before[-40:]!r}", sent=sent)


def logit_bias(s: Session) -> Finding:
    """Temperature 0 with the likeliest token biased down and the third likeliest up by the most OpenAI allows:
    the third is drawn."""
    ref = s.ref
    a, c = ref.ids[0], ref.ids[min(2, len(ref) - 1)]
    if a < 0 or c < 0:  # (the transport names a token it knows only by its text with a negative id)
        return Finding("untested", "the server names no token ids and the model's tokenizer is not here "
                       "(--tokenizer FOLDER)")
    reply = s.ask(NEUTRAL.with_(temperature=0.0, logit_bias=((a, -MAX_BIAS), (c, MAX_BIAS))), top_n=len(ref))
    tok, sent = reply.drawn, f"logit_bias {{{a}: -{MAX_BIAS:g}, {c}: +{MAX_BIAS:g}}}, temperature=0"
    if tok is None:
        return Finding("inconclusive", "the drawn token has no visible text", sent=sent)
    if tok.id == c:
        shown = Dist.of(tok).lp(c)
        note = ("; its reported log-probability includes the bias" if shown is not None and shown > -TOL else
                "; the reported log-probabilities leave the bias out")
        return Finding("honoured", f"drew {tok.text!r}, the biased-up token{note}", sent=sent)
    if tok.id == a:
        return Finding("ignored", f"drew {tok.text!r}, the likeliest, as without a bias", sent=sent)
    return Finding("differs", f"drew {tok.text!r}, neither the likeliest nor the biased-up "
                   f"{ref.texts[ref.index(c)]!r}",
                   sent=sent)


def penalty(field: str) -> Callable[[Session], Finding]:
    """The check of one penalty: the temperature-0 run again with the penalty at PENALTIES[field]."""

    def check(s: Session) -> Finding:
        value, run = PENALTIES[field], s.greedy
        got = s.ask(NEUTRAL.with_(temperature=0.0, max_tokens=RUN, **{field: value}), top_n=len(s.ref))
        sent = f"{field}={value:g}, temperature=0"
        k = _first_difference(run, got)
        if k is not None:  # a penalty only lowers tokens that appeared: the first change is at one of them
            was = run.tokens[k].text if k < len(run.tokens) else ""
            seen = k < len(run.tokens) and (run.ids[k] in run.ids[:k] or _in_prompt(was, s.prompt))
            now = repr(got.tokens[k].text) if k < len(got.tokens) else "the end"
            if not seen:
                return Finding("differs", f"the temperature-0 run changes at token {k + 1}, where {was!r} had not "
                               f"appeared before (now {now}): not what a penalty does", sent=sent)
            return Finding("honoured", f"the temperature-0 run changes at token {k + 1} ({was!r} had appeared "
                           f"before): now {now}", sent=sent)
        repeats = [i for i in range(len(run.ids)) if run.ids[i] in run.ids[:i]]
        if not repeats:
            return Finding("inconclusive", f"the temperature-0 run repeats no token in {len(run.ids)}", sent=sent)
        if field == "repetition_penalty":  # it scales a logit by its sign, which no reported number shows
            return Finding("ignored", f"the temperature-0 run is unchanged at {len(repeats)} repeated tokens",
                           "not bounded: a multiplicative penalty's effect depends on the raw logit's sign", sent)
        lead = _lead(s, run, repeats[0])
        if lead is not None and lead < value - TOL:
            return Finding("ignored", f"unchanged, though at token {repeats[0] + 1} the repeated "
                           f"{run.tokens[repeats[0]].text!r} led the best unseen token by {lead:.2f} < {value:g}",
                           sent=sent)
        return Finding("inconclusive", "unchanged, but no repeated token led by less than the penalty", sent=sent)

    check.__name__ = field
    return check


def _lead(s: Session, run: Reply, i: int) -> float | None:
    """How far the run's token i (a repeat) led the likeliest token that neither the run before it nor the
    prompt's text holds, in the run's own reported list, else in one asked for at temperature 1 from that point
    (a server reporting sampled log-probabilities lists the drawn token alone at temperature 0)."""
    for dist in (Dist.of(run.tokens[i]), None):
        if dist is None:
            prefix = "".join(t.text for t in run.tokens[:i])
            dist = Dist.of(s.ask(NEUTRAL, prompt=s.prompt + prefix, top_n=len(s.ref)).first)
        if not dist.ids or dist.ids[0] != run.ids[i]:
            continue
        fresh = [lp for tid, text, lp in zip(dist.ids, dist.texts, dist.logprobs, strict=True)
                 if tid not in run.ids[:i] and not _in_prompt(text, s.prompt)]
        if fresh:
            return dist.logprobs[0] - fresh[0]
    return None


def _in_prompt(text: str, prompt: str) -> bool:
    """Whether a token's text may be one of the prompt's tokens (which some servers penalise too)."""
    return text in prompt or (bool(text.strip()) and text.strip() in prompt)


# fields answered whole ------------------------------------------------------------------------------------------
def n(s: Session) -> Finding:
    choices = s.whole(NEUTRAL.with_(max_tokens=2), {"n": 3}).get("choices")
    got = len(choices) if isinstance(choices, list) else 0
    verdict = "honoured" if got == 3 else "ignored" if got == 1 else "differs"
    return Finding(verdict, f"{got} choice{'s' * (got != 1)} for 3", sent="n=3")


def echo(s: Session) -> Finding:
    """/completions with echo: the text begins with the prompt; whether its tokens' log-probabilities come too
    (log-likelihood evaluations need them)."""
    choice = (s.whole(NEUTRAL, {"echo": True}, top_n=1).get("choices") or [{}])[0]
    text = choice.get("text") if isinstance(choice, dict) else None
    if not isinstance(text, str) or not text.startswith(s.prompt):
        return Finding("ignored", f"the text does not begin with the prompt: {str(text)[:40]!r}", sent="echo=true")
    lp = choice.get("logprobs")
    listed = lp.get("content") or lp.get("tokens") if isinstance(lp, dict) else None
    count = len(listed) - 1 if isinstance(listed, list) else 0  # (less the token it drew)
    numbers = lp.get("token_logprobs") if isinstance(lp, dict) else None
    null = ", the first null (it has no context)" if isinstance(numbers, list) and numbers[:1] == [None] else ""
    has = (f"with log-probabilities for its {count} prompt tokens{null}" if count > 0
           else "without the prompt's log-probabilities")
    return Finding("honoured", f"the text begins with the prompt, {has}", sent="echo=true, logprobs")


def top_logprobs(s: Session) -> Finding:
    tok = s.ask(NEUTRAL, top_n=ASKED_TOP).first
    got = len(tok.top) if tok else 0
    sent = f"top_logprobs={ASKED_TOP}"
    if got == ASKED_TOP or (got == ASKED_TOP + 1 and tok is not None and tok.id in {c.id for c in tok.top}):
        plus = ", and the drawn token where it is not among them" if got > ASKED_TOP else ""
        return Finding("honoured", f"{ASKED_TOP} candidates a step{plus}", sent=sent)
    return Finding("ignored" if got > ASKED_TOP else "differs", f"{got} candidates a step for {ASKED_TOP}", sent=sent)
