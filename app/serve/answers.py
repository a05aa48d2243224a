"""A call's answer, built from its job's events as they come (`Answer.take`): the chunks a stream sends for each
event (chat.completion.chunk, text_completion, the Responses API's events) and the whole answer at the end. The
`logitlab` extension field names the runs, the fields not applied, which log-probabilities these are and the seed.
Log-probabilities come from each step's record (`logprobs`), one entry per step, markers included. A thinking model's
chat answer has its think span in `reasoning_content` (`reasoning.Split`). No HTTP, no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.core.events import Event, Finished, Prefilled, Scored, Step
from app.core.record.spans import find_markers
from app.serve import logprobs as lp
from app.serve.calls import Call
from app.serve.reasoning import Split

if TYPE_CHECKING:
    from app.core.record.record import StepTrace
    from backends.base import Tokenizer

FINISH = {"eos": "stop", "stop": "stop", "length": "length", "context": "length"}  # else ours as it is (cancelled)


@dataclass
class Choice:
    run_id: int
    text: list[str] = field(default_factory=list)
    steps: list[StepTrace] = field(default_factory=list)
    finish: str | None = None
    split: Split = field(default_factory=lambda: Split(None))  # chat: its think span and its answer apart


class Answer:
    def __init__(self, call: Call, model: str, tok: Tokenizer, scored: Scored | None = None) -> None:
        """`scored`: the prompt's own log-probabilities (echo)."""
        self.call, self.model, self.tok = call, model, tok
        self.score = scored.score if scored is not None else None
        # a thinking model's chat: each choice's think span apart from its answer (None: all of it is content)
        self.markers = find_markers(tok, call.request.settings.think_markers) \
            if call.route == "chat" and call.reasoning else None
        self.choices = [Choice(rid, split=Split(self.markers)) for rid in call.request.run_ids] if call.generate else []
        self.prompt_text = scored.prompt_text if scored is not None else ""
        self.prompt_tokens = len(scored.score.ids) if scored is not None else 0
        self.seed = call.request.settings.seed

    # the extension and usage ------------------------------------------------------------------------------------
    def ext(self) -> dict[str, Any]:
        return {"run_ids": [c.run_id for c in self.choices], "ignored": list(self.call.ignored),
                "logprobs": self.call.mode, "seed": self.seed,
                "finish": [c.finish for c in self.choices], "settings": self.call.request.settings.to_dict()}

    def usage(self) -> dict[str, int]:
        done = sum(len(c.steps) for c in self.choices)
        if self.call.route == "responses":
            return {"input_tokens": self.prompt_tokens, "output_tokens": done,
                    "total_tokens": self.prompt_tokens + done}
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": done,
                "total_tokens": self.prompt_tokens + done}

    # events -> chunks -------------------------------------------------------------------------------------------
    def take(self, event: Event) -> list[dict[str, Any]]:
        """What a stream sends for `event` (its state kept for the whole answer)."""
        if isinstance(event, Prefilled):
            self.prompt_tokens, self.prompt_text, self.seed = len(event.prompt_ids), event.prompt_text, event.seed
            return self.opening()
        if isinstance(event, Step):
            c = self.choices[event.sequence]
            if event.token_id in self.tok.eos_ids and not event.text:
                return []  # (the end of text is no token of the answer: OpenAI's never list it)
            c.text.append(event.text)
            if event.trace is not None:
                c.steps.append(event.trace)
            return [self._delta(event.sequence, event.text, event.trace, event.token_id)]
        if isinstance(event, Finished):
            c = self.choices[event.sequence]
            c.finish = FINISH.get(event.reason, event.reason)
            if self.call.route == "responses":
                return []
            held = c.split.flush() if self.call.route == "chat" else ("", "")
            return [*([self._chat_delta(event.sequence, *held, None)] if any(held) else []), self._end(event.sequence)]
        return []

    def closing(self) -> list[dict[str, Any]]:
        """The chunks after the last event: usage (where asked), the Responses API's completion."""
        if self.call.route == "responses":
            r = self.whole()
            return [{"type": "response.output_text.done", "item_id": r["output"][0]["id"], "output_index": 0,
                     "content_index": 0, "text": r["output_text"]},
                    {"type": "response.completed", "response": r}]
        if self.call.usage:
            return [{**self._base(), "choices": [], "usage": self.usage(), "logitlab": self.ext()}]
        return []

    def _base(self) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.call.route == "chat" else "text_completion"
        return {"id": self.call.id, "object": kind, "created": self.call.created, "model": self.model}

    def opening(self) -> list[dict[str, Any]]:
        if self.call.route == "responses":
            return [{"type": "response.created", "response": {**self.whole(), "status": "in_progress"}}]
        if self.call.route == "chat":
            return [{**self._base(), "logitlab": self.ext(),
                     "choices": [{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None,
                                  "logprobs": None} for i in range(len(self.choices))]}]
        if self.call.echo:
            prompt = self._prompt_logprobs()
            return [{**self._base(), "logitlab": self.ext(),
                     "choices": [{"index": i, "text": self.prompt_text, "finish_reason": None, "logprobs": prompt}
                                 for i in range(max(1, len(self.choices)))]}]
        return []

    def _delta(self, i: int, text: str, step: StepTrace | None, token: int) -> dict[str, Any]:
        if self.call.route == "responses":
            entry = [lp.chat_entry(step, self.tok, self.call.mode, self.call.top)] if self._lp(step) else []
            return {"type": "response.output_text.delta", "item_id": f"msg-{self.call.id}", "output_index": 0,
                    "content_index": 0, "delta": text, "logprobs": entry}
        if self.call.route == "chat":
            logprobs = {"content": [lp.chat_entry(step, self.tok, self.call.mode, self.call.top)]} \
                if self._lp(step) else None
            reasoning, content = self.choices[i].split.take(token, text, step.span if step is not None else "")
            return self._chat_delta(i, reasoning, content, logprobs)
        logprobs = lp.legacy([step], self.tok, self.call.mode, self.call.top) if self._lp(step) else None
        return {**self._base(), "choices": [{"index": i, "text": text, "finish_reason": None, "logprobs": logprobs}]}

    def _chat_delta(self, i: int, reasoning: str, content: str, logprobs: dict | None) -> dict[str, Any]:
        """A chat chunk: the think span's text in reasoning_content, the answer's in content (a marker: content "")."""
        delta = {"reasoning_content": reasoning} if reasoning else {}
        if content or not reasoning:
            delta["content"] = content
        return {**self._base(), "choices": [{"index": i, "delta": delta, "finish_reason": None,
                                             "logprobs": logprobs}]}

    def _end(self, i: int) -> dict[str, Any]:
        finish = self.choices[i].finish
        body = {"index": i, "finish_reason": finish, "logprobs": None}
        body.update({"delta": {}} if self.call.route == "chat" else {"text": ""})
        return {**self._base(), "choices": [body], "logitlab": self.ext()}

    def _lp(self, step: StepTrace | None) -> bool:
        return self.call.logprobs and step is not None

    def _prompt_logprobs(self) -> dict[str, Any] | None:
        if self.score is None or not self.call.logprobs:
            return None
        return lp.prompt_legacy(self.score, self.tok, self.call.top)

    # the whole answer -------------------------------------------------------------------------------------------
    def whole(self) -> dict[str, Any]:
        if self.call.route == "chat":
            return {"id": self.call.id, "object": "chat.completion", "created": self.call.created,
                    "model": self.model, "choices": [self._chat_choice(i, c) for i, c in enumerate(self.choices)],
                    "usage": self.usage(), "logitlab": self.ext()}
        if self.call.route == "completions":
            return {"id": self.call.id, "object": "text_completion", "created": self.call.created,
                    "model": self.model,
                    "choices": [self._text_choice(i, c) for i, c in enumerate(self.choices or [Choice(0)])],
                    "usage": self.usage(), "logitlab": self.ext()}
        return self._response()

    def _chat_choice(self, i: int, c: Choice) -> dict[str, Any]:
        logprobs = {"content": [lp.chat_entry(s, self.tok, self.call.mode, self.call.top) for s in c.steps]} \
            if self.call.logprobs else None
        message = {"role": "assistant", "content": "".join(c.text)}
        if self.markers is not None:  # a thinking model's: its think span apart (None: it did not think)
            message = {**message, "content": "".join(c.split.content),
                       "reasoning_content": "".join(c.split.reasoning) or None}
        return {"index": i, "message": message, "finish_reason": c.finish, "logprobs": logprobs}

    def _text_choice(self, i: int, c: Choice) -> dict[str, Any]:
        text = "".join(c.text)
        logprobs = lp.legacy(c.steps, self.tok, self.call.mode, self.call.top) if self.call.logprobs else None
        if self.call.echo:
            prompt = self._prompt_logprobs()
            if prompt is not None and logprobs is not None:
                logprobs = lp.join_legacy(prompt, logprobs)
            text = self.prompt_text + text
        return {"index": i, "text": text, "finish_reason": c.finish, "logprobs": logprobs}

    def _response(self) -> dict[str, Any]:
        c = self.choices[0]
        text = "".join(c.text)
        logprobs = [lp.chat_entry(s, self.tok, self.call.mode, self.call.top) for s in c.steps] \
            if self.call.logprobs else []
        status = "completed" if c.finish in ("stop", None) else "incomplete"
        item = {"type": "message", "id": f"msg-{self.call.id}", "role": "assistant", "status": status,
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}]}
        return {"id": self.call.id, "object": "response", "created_at": self.call.created, "model": self.model,
                "status": status, "output": [item], "output_text": text, "usage": self.usage(),
                "incomplete_details": None if status == "completed" else {"reason": "max_output_tokens"},
                "parallel_tool_calls": False, "tool_choice": "none", "tools": [], "logitlab": self.ext()}
