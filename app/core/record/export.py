"""Exports of a finished run, drawn from its recorded trace only: the output as Markdown or HTML with each token
shaded by the probability it was drawn with (the output view's colours), the steps as CSV (a row per step or a
row per candidate). Pure text and colour maths: no Qt; the JSON Lines trace is `RunTrace.save`; files are written
by `app.core.files.write_atomic`.

In a CSV a number the record does not hold (None, or NaN: not observed) is an empty cell, and an infinite one (the
log-probability of a token of probability 0, or what a server's nonsense overflows to) is `inf` or `-inf`, as
Python's float(), pandas and numpy read it back.
"""

from __future__ import annotations

import csv
import html
import io
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from app.core.settings import ENGINE_CHAINS, SamplerSettings, complete_chain
from app.core.stage_table import ROWS

if TYPE_CHECKING:
    from app.core.record.trace import RunTrace, StepTrace


SHADES = 20  # the output view shades a token with one of this many colours, by its probability
ALPHA = 120  # of the shading, over 255: translucent, so text stays readable
STEP_COLUMNS = ("step", "token_id", "text", "prob", "logprob", "raw_prob", "raw_logprob", "rank", "entropy",
                "final_entropy", "u", "seconds", "span", "forced")  # span: think / answer / tool (a thinking model's)
THINK_STYLE = "font-style: italic; color: #69648c"  # the think span's tokens (the output view's look)
CANDIDATE_COLUMNS = ("step", "candidate", "token_id", "text", "raw_prob", "prob", "cut_by", "drawn")


# shading ------------------------------------------------------------------------------------------------------
def shade(p: float | None) -> int | None:
    """The shade (0 .. SHADES - 1) of a token drawn with probability p; None where p was not recorded."""
    if p is None or math.isnan(p):
        return None
    return round(min(max(p, 0.0), 1.0) * (SHADES - 1))


def shade_rgba(level: int) -> tuple[int, int, int, int]:
    """The colour of a shade: hue 0 (red, unlikely) through 120 (green, likely) at HSV saturation 200 and value
    235 of 255, as the output view draws it (QColor.fromHsv)."""
    hue = int(120 * (level / (SHADES - 1)))
    r, g, b = _hsv_rgb(hue / 60, 200 / 255, 235 / 255)
    return r, g, b, ALPHA


def _hsv_rgb(h: float, s: float, v: float) -> tuple[int, int, int]:
    i, f = int(h), h - int(h)
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    rgb = ((v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q))[i % 6]
    return tuple(round(c * 255) for c in rgb)  # type: ignore[return-value]


def css_color(level: int) -> str:
    r, g, b, a = shade_rgba(level)
    return f"rgba({r}, {g}, {b}, {a / 255:.3f})"


# Markdown and HTML --------------------------------------------------------------------------------------------
def describe(s: SamplerSettings) -> str:
    """The settings in one line, as a person reads them: the four main samplers, then each other stage that is on
    (the penalties first), as its row of the stage table says it, and the order the stages run in."""
    said = [row for row in ROWS if row.says is not None]
    parts = [row.says(s) for row in said if row.main] + [row.says(s) for row in said if not row.main and row.is_on(s)]
    return " · ".join([*parts, f"order: {order_text(s)}" if s.chain else s.order.value])


def order_text(s: SamplerSettings) -> str:
    """The order the stages run in: an old order's name (temperature-first / -last), an engine's by its name
    ("llama.cpp"), else a custom chain as the stages it turns on, in order ("top-k → temperature → top-p")."""
    if not s.chain:
        return s.order.value
    engine = next((e for e, names in ENGINE_CHAINS.items() if complete_chain(names) == s.chain), None)
    return engine or " → ".join(n.replace("_", "-") for n in s.enabled_stages())


def _about(run: RunTrace) -> list[tuple[str, str]]:
    model = run.model or {}
    name = model.get("name") or model.get("source") or "unknown"
    backend = f" ({model['backend']})" if model.get("backend") else ""
    about = [("Model", name + backend), ("Settings", describe(run.settings)), ("Seed", str(run.seed)),
             ("Tokens", f"{len(run.steps)}, finished by {run.finish_reason or 'unknown'}")]
    return about + ([("Spans", thinking(run))] if any(st.span for st in run.steps) else [])


def thinking(run: RunTrace) -> str:
    """A thinking model's spans in words: each span's length and means (entropy H, varentropy V, DeepConf
    confidence C with its k), and a think budget's cut."""
    from app.core.record.span_stats import span_stats  # (numpy's: not before the window's first paint)

    parts = [f"{sp.kind} {sp.end - sp.start} tokens" + "".join(
        f", {name} {v:.2f}" for name, v in (("H", sp.entropy), ("V", sp.varentropy), ("C", sp.confidence))
        if v is not None) + (f" (k {sp.k})" if sp.confidence is not None else "") for sp in span_stats(run.steps)]
    cut = [st.step for st in run.steps if st.forced == "budget"]
    budget = run.settings.think_budget
    if budget:
        parts.append(f"think budget {budget} ({'soft' if run.settings.think_soft else 'hard'})"
                     + (f", cut at step {cut[0]}" if cut else ""))
    return "; ".join(parts)


def _title(step: StepTrace) -> str:
    from app.core.record.record import model_id  # (here: record imports numpy, which the window's first paint does not)

    s = step.sample
    p, kind = step.drawn_prob
    shown = "not recorded" if p is None else f"{p:.4g}" + (" under the model" if kind == "model" else "")
    rank = "" if s.rank is None else f" · rank {s.rank}"
    token = "" if model_id(s.token) is None else f" · token {s.token}"
    return f"step {step.step}{token} · p = {shown}{rank}"


def token_spans(run: RunTrace) -> str:
    """The output as HTML spans, one per token that added text, shaded by its probability (a tooltip per span)."""
    out = []
    for st in run.steps:
        if not st.text:
            continue
        level = shade(st.drawn_prob[0])  # a server's run: the model's probability (its sampling not observed)
        styles = ([] if level is None else [f"background-color: {css_color(level)}"]) + (
            [THINK_STYLE] if st.span == "think" else [])
        style = f' style="{"; ".join(styles)}"' if styles else ""
        span = f' class="{st.span}"' if st.span else ""
        out.append(f'<span{span} title="{html.escape(_title(st))}"{style}>{html.escape(st.text, quote=False)}</span>')
    return "".join(out)


def legend_spans() -> str:
    cells = (f'<span style="background-color: {css_color(i)}">&nbsp;&nbsp;</span>' for i in range(SHADES))
    return f"p = 0 {''.join(cells)} p = 1"


def to_markdown(run: RunTrace) -> str:
    """The run as Markdown: what produced it, the prompt in a code block, the output in an HTML block
    (CommonMark keeps a <pre> block whole) with each token shaded by its probability."""
    lines = [f"# Logit Lab run {run.run_id}", ""]
    lines += [f"- **{k}:** {v}" for k, v in _about(run)]
    fence = "`" * max(3, _longest_run(run.prompt_text, "`") + 1)
    lines += ["", "## Prompt", "", f"{fence}text", run.prompt_text, fence, "", "## Output", "",
              f"<pre>{token_spans(run)}</pre>", "",
              f"Each token is shaded by the probability it was drawn with: {legend_spans()} "
              "(hover a token for its step, probability and rank).", ""]
    return "\n".join(lines)


def _longest_run(text: str, ch: str) -> int:
    best = n = 0
    for c in text:
        n = n + 1 if c == ch else 0
        best = max(best, n)
    return best


HTML_STYLE = """body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }
pre { white-space: pre-wrap; font-size: 0.95rem; line-height: 1.5; }
pre.prompt { color: #666; border-left: 3px solid #ccc; padding-left: 0.8rem; }
dt { font-weight: bold; float: left; clear: left; width: 6rem; } dd { margin-left: 6.5rem; }"""


def to_html(run: RunTrace) -> str:
    """The run as a standalone HTML page: the prompt, then the output with each token shaded by its probability."""
    about = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in _about(run))
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>Logit Lab run {run.run_id}</title>\n<style>\n{HTML_STYLE}\n</style>\n</head>\n<body>\n"
            f"<h1>Logit Lab run {run.run_id}</h1>\n<dl>{about}</dl>\n<h2>Prompt</h2>\n"
            f'<pre class="prompt">{html.escape(run.prompt_text, quote=False)}</pre>\n<h2>Output</h2>\n'
            f'<pre class="output">{token_spans(run)}</pre>\n<p>{legend_spans()}</p>\n</body>\n</html>\n')


# CSV ----------------------------------------------------------------------------------------------------------
def _csv(header: tuple[str, ...], rows: Iterable[tuple[object, ...]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(tuple("" if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in row)
                for row in rows)
    return buf.getvalue()


def _log(p: float | None) -> float | None:
    return None if p is None else math.log(p) if p > 0 else float("-inf")


def _exp(lp: float | None) -> float | None:
    """e to the `lp`, infinite past the largest float (a log-probability a server got wrong)."""
    try:
        return None if lp is None else math.exp(lp)
    except OverflowError:
        return math.inf


def steps_csv(run: RunTrace) -> str:
    """A row per step: the drawn token, its final and raw probabilities, rank, entropies, uniform, time."""
    from app.core.record.record import model_id

    return _csv(STEP_COLUMNS, ((st.step, model_id(st.token_id), st.text, st.prob, _log(st.prob),
                                _exp(st.sample.raw_logprob), st.sample.raw_logprob, st.sample.rank,
                                st.sample.entropy, st.sample.final_entropy, st.sample.u, st.seconds,
                                st.span or None, st.forced or None) for st in run.steps))


def candidates_csv(run: RunTrace) -> str:
    """A row per recorded candidate of every step (top-N by raw probability): raw and final probability, the
    stage that cut it, and whether it was the token drawn."""
    from app.core.record.record import model_id

    def rows() -> Iterable[tuple[object, ...]]:
        for st in run.steps:
            s = st.sample
            raw, final = s.raw_probs, s.final_probs
            for i, text in enumerate(st.top_texts):
                tid = int(s.top_ids[i])
                yield (st.step, i, model_id(tid), text, None if raw is None else float(raw[i]),
                       None if final is None else float(final[i]), st.cut_by(i), int(tid == s.token))
    return _csv(CANDIDATE_COLUMNS, rows())
