"""The session file: what a person made in the window as one versioned JSON Lines file. A header line (prompt,
chat messages, sampler settings, the model's source and backend, the run shown, and what the views showed:
side-by-side groups, the prompt set, the `views` records), then per run a line with its name (and, for one of N
samples, its request) followed by its trace in the trace file's own lines (`trace.to_lines`; the trace's header
holds the run id and parent). A key newer than a file is absent from it: nothing of that kind. Written atomically,
read back equal; a newer or damaged file raises `SessionFormatError` naming file and line, and nothing is
half-loaded. A lone run's trace file opens as a session of that run. No Qt.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.compare.prompt_sets import PromptSet, prompt_set_json, read_prompt_set_json
from app.core.events import Finished, Message, Prefilled, Request
from app.core.files import brief, check_header, is_a, parse_json, read_field, whole, write_lines
from app.core.metrics import Metrics
from app.core.models.sources import BUILTIN_NAME, ModelSpec
from app.core.session import run_group
from app.core.session.run_group import RunGroup
from app.core.session.store import Run, Session
from app.core.session.view_records import Views, read_views, views_json
from app.core.settings import SamplerSettings, read_settings

if TYPE_CHECKING:
    from app.core.record.trace import RunTrace

FORMAT = "logitlab-session"
VERSION = 1
ROLES = ("system", "user", "assistant")
MAX_RUN_ID = 20_000  # a saved run id above it is not kept (moving the process's ids past it would take long)


class SessionFormatError(ValueError):
    """A session file this version cannot read (newer, damaged or not a session); the message names file and line."""


@dataclass(frozen=True)
class SavedRun:
    name: str  # the user's name for the branch ("": labelled by its first tokens)
    trace: RunTrace  # its run_id and parent are the run's own
    request: int | None = None  # one of N samples of a request: the request's id (None: a request of its own)

    @property
    def id(self) -> int:
        return self.trace.run_id

    @property
    def parent(self) -> tuple[int, int] | None:
        return self.trace.parent


@dataclass(frozen=True)
class SavedSession:
    prompt: str = ""  # the completion editor's text
    messages: tuple[Message, ...] = ()  # the chat editor's messages (kept in completion mode too)
    chat: bool = False  # the chat editor was the one in use
    settings: SamplerSettings = field(default_factory=SamplerSettings)
    model: str = BUILTIN_NAME  # the model's source: "builtin", a folder or a hub id
    backend: str = "auto"
    runs: tuple[SavedRun, ...] = ()  # in the order they were started
    shown: int | None = None  # the id of the run shown
    origin: str = ""  # an autosave's: the file the session was last saved to or opened from ("": none)
    groups: tuple[RunGroup, ...] = ()  # runs compared together (side by side); absent from older files
    prompt_set: PromptSet | None = None  # the prompt set and its last results; absent from older files
    views: Views = field(default_factory=Views)  # what the beam, sweep... views showed; absent from older files


def save(doc: SavedSession, path: str | os.PathLike, cache: EncodedTraces | None = None) -> None:
    """Write the session atomically: a reader sees the old file or the whole new one, never half of it. With
    `cache`, each run's trace is encoded once and its lines reused by later saves."""
    write_lines(path, encode(doc, cache))


def encode(doc: SavedSession, cache: EncodedTraces | None = None) -> Iterator[str]:
    """The file's lines, as text."""
    cache = cache if cache is not None else EncodedTraces()
    yield _dumps({"format": FORMAT, "version": VERSION, "prompt": doc.prompt,
                  "messages": [{"role": m.role, "content": m.content} for m in doc.messages], "chat": doc.chat,
                  "settings": doc.settings.to_dict(), "model": {"source": doc.model, "backend": doc.backend},
                  "shown": doc.shown, "origin": doc.origin, "runs": len(doc.runs),
                  "groups": [run_group.to_json(g) for g in doc.groups],
                  **({"prompt_set": prompt_set_json(doc.prompt_set)} if doc.prompt_set is not None else {}),
                  **({"views": views} if (views := views_json(doc.views)) else {})})
    for run in doc.runs:
        yield _dumps({"run": run.id, "name": run.name, "steps": len(run.trace.steps),
                      **({"request": run.request} if run.request is not None else {})})
        yield from cache.lines(run.trace)
    cache.forget_all_but(doc.runs)


class EncodedTraces:
    """Each saved trace's lines, kept for the next save: a finished run's trace never changes, and encoding it
    is nearly all of a save's time (autosave writes the whole session a few seconds after each change). Keyed
    by the run's id and parent and the very list of its steps; used by one thread at a time."""

    def __init__(self) -> None:
        self._lines: dict[tuple, tuple[list, int, list[str]]] = {}  # key -> (the steps, how many, the lines)

    @staticmethod
    def _key(trace: RunTrace) -> tuple:
        return trace.run_id, trace.parent, id(trace.steps)

    def lines(self, trace: RunTrace) -> list[str]:
        from app.core.record import trace as traces  # (numpy's, as below: not before the window's first paint)

        hit = self._lines.get(self._key(trace))
        if hit is None or hit[0] is not trace.steps or hit[1] != len(trace.steps):
            hit = trace.steps, len(trace.steps), [_dumps(obj) for obj in traces.to_lines(trace)]
            self._lines[self._key(trace)] = hit
        return hit[2]

    def forget_all_but(self, runs: Iterable[SavedRun]) -> None:
        keep = {self._key(r.trace) for r in runs}
        self._lines = {k: v for k, v in self._lines.items() if k in keep}


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


def load(path: str | os.PathLike) -> SavedSession:
    """Read a file `save` wrote (or a run's trace file); a newer or damaged one raises `SessionFormatError`."""
    path = Path(path)
    with path.open("rb") as f:
        return from_lines(f.readlines(), str(path))


def load_header(path: str | os.PathLike) -> SavedSession:
    """The session's header alone (prompt, messages, settings, model; no runs): quick, to describe a file."""
    from app.core.record import trace_file

    path = Path(path)
    with path.open("rb") as f:
        head = _line([f.readline()], 0, str(path))
    return load(path) if head.get("format") == trace_file.FORMAT else _header(head, str(path))[0]


def from_lines(lines: Sequence[str | bytes], name: str = "<session>") -> SavedSession:
    """The session in `lines` (a file's lines, UTF-8 bytes or text); `name` names it in error messages."""
    from app.core.record import trace_file

    if not lines:
        raise SessionFormatError(f"{name}:1: empty file, not a Logit Lab session")
    head = _line(lines, 0, name)
    if head.get("format") == trace_file.FORMAT:
        return _lone_trace(lines, name)
    doc, count = _header(head, name)
    runs, i = [], 1
    for _ in range(count):
        run, i = _run(lines, i, name)
        runs.append(run)
    if i < len(lines):
        raise SessionFormatError(f"{name}:{i + 1}: text after the session's last run")
    if len({r.id for r in runs}) != len(runs):
        raise SessionFormatError(f"{name}: two runs share one id")
    saved = {r.id for r in runs}
    if any(set(g.run_ids) - saved for g in doc.groups):
        raise SessionFormatError(f"{name}:1: a group names a run the file does not hold")
    return replace(doc, runs=tuple(runs))


def runs_of(session: Session) -> tuple[SavedRun, ...]:
    """The session's runs that left a trace (a run still streaming or one that failed has none), each trace
    carrying its run's id and parent as the session numbers them; the samples of one request name it."""
    return tuple(SavedRun(r.name, replace(r.trace, run_id=r.id, parent=r.parent),
                          r.request.id if r.request.n > 1 else None)
                 for r in session.runs.values() if r.trace is not None)


def groups_of(session: Session) -> tuple[RunGroup, ...]:
    """The session's groups, each with only its columns whose run `runs_of` saves (none left: not saved)."""
    saved = {r.id for r in session.runs.values() if r.trace is not None}
    return tuple(g for g in (group.keeping(saved) for group in session.groups) if g is not None)


def to_session(doc: SavedSession) -> tuple[Session, int | None]:
    """A live session of the saved runs, each finished with its trace, and the id of the run to show.

    Runs keep their saved ids (what the tree, the exports and the user call them), and ids given out from then on
    are above them, so a run started later never takes one. Ids a file could not have written (not from 1 to
    `MAX_RUN_ID`) are given fresh instead; parents and the views' records follow them. The samples of one request
    are again one request's."""
    session, new_ids = Session(), {}
    spec = ModelSpec(doc.model, doc.backend)
    keep = all(1 <= saved.id <= MAX_RUN_ID for saved in doc.runs)
    if keep and doc.runs:
        _ids_above(max(saved.id for saved in doc.runs))
    for samples in _requests(doc.runs):
        first = samples[0]
        parent = first.parent
        if parent is not None:
            parent = (new_ids[parent[0]], parent[1]) if parent[0] in new_ids else None
        ids = {"id": first.id, "run_ids": tuple(saved.id for saved in samples)} if keep else {}
        request = Request(model=spec, prompt_ids=tuple(first.trace.prompt_ids), settings=first.trace.settings,
                          parent=parent, branch=first.trace.branch, n=len(samples), **ids)
        for run, saved in zip(session.start(request), samples, strict=True):
            _finish(run, replace(saved.trace, run_id=run.id, parent=parent), saved.name)
            new_ids[saved.id] = run.id
    _regroup(session, doc.groups, new_ids)
    session.prompt_set = doc.prompt_set
    session.views = doc.views.renumbered(new_ids)
    shown = new_ids.get(doc.shown) if doc.shown is not None else None
    if shown is None and session.runs:
        shown = next(reversed(session.runs))
    return session, shown


def _requests(runs: Iterable[SavedRun]) -> list[list[SavedRun]]:
    """The saved runs by request, in the order saved: the samples of one request together, any other run alone."""
    requests: dict[object, list[SavedRun]] = {}
    for saved in runs:
        requests.setdefault(saved.id if saved.request is None else ("samples of", saved.request), []).append(saved)
    return list(requests.values())


def _regroup(session: Session, groups: Iterable[RunGroup], new_ids: dict[int, int]) -> None:
    """The saved groups, renumbered as the runs were; a column's run runs again on the column's model."""
    session.groups = [g for g in (group.keeping(new_ids) for group in groups) if g is not None]
    for column in (c for g in session.groups for c in g.columns if c.model is not None):
        run = session.runs[column.run_id]
        run.request = replace(run.request, model=column.model)


def _ids_above(top: int) -> None:
    """Make the ids this process gives out from now on (`Request().id`) greater than `top`."""
    spec, settings = ModelSpec(), SamplerSettings()  # made once: each id then costs ~10 µs
    while Request(model=spec, settings=settings).id < top:
        pass


def _finish(run: Run, trace: RunTrace, name: str) -> None:
    """Fill `run` as if its events had arrived: prefilled, every step, finished with `trace`."""
    metrics = trace.metrics or Metrics(prompt_tokens=len(trace.prompt_ids), generated_tokens=len(trace.steps))
    run.prefilled = Prefilled(run.request.id, tuple(trace.prompt_ids), trace.prompt_text, trace.seed,
                              metrics.prefill_s, metrics.reused_tokens)
    run.steps = list(trace.steps)
    run.finished = Finished(run.request.id, trace.finish_reason or "length", metrics, trace, run.id,
                            message=trace.finish_message)
    run.name = name


def _line(lines: Sequence[str | bytes], i: int, name: str) -> dict[str, Any]:
    """Line i (0-based) as a JSON object."""
    if i >= len(lines):
        raise SessionFormatError(f"{name}:{i + 1}: the file ends before the session's last run (truncated)")
    try:
        obj = parse_json(lines[i])
    except ValueError as e:
        raise SessionFormatError(f"{name}:{i + 1}: damaged line ({e})") from None
    if not isinstance(obj, dict):
        raise SessionFormatError(f"{name}:{i + 1}: damaged line (not a JSON object: {brief(obj)})")
    return obj


def _header(obj: dict[str, Any], name: str) -> tuple[SavedSession, int]:
    """The session the header describes (no runs yet), and how many runs follow."""
    try:
        return _header_fields(obj)
    except SessionFormatError as e:
        raise SessionFormatError(f"{name}:1: {e}") from None
    except (ValueError, TypeError) as e:  # a field's check says which and why
        raise SessionFormatError(f"{name}:1: damaged session header ({e})") from None


def _header_fields(obj: dict[str, Any]) -> tuple[SavedSession, int]:
    check_header(obj, FORMAT, VERSION, "session", SessionFormatError)
    model = read_field(obj, "model", is_a(dict), "an object")
    messages = read_field(obj, "messages", is_a(list), "a list")
    doc = SavedSession(prompt=read_field(obj, "prompt", is_a(str), "text"),
                       messages=tuple(_message(m, i) for i, m in enumerate(messages)),
                       chat=read_field(obj, "chat", is_a(bool), "true or false"),
                       settings=read_settings(read_field(obj, "settings", is_a(dict), "an object")),
                       model=read_field(model, "source", is_a(str), "text", where="model."),
                       backend=read_field(model, "backend", is_a(str), "text", where="model."),
                       shown=read_field(obj, "shown", whole, "a whole number", null=True),
                       origin=read_field(obj, "origin", is_a(str), "text", default=""),
                       groups=tuple(run_group.from_json(g, f"groups[{i}].") for i, g in enumerate(
                           read_field(obj, "groups", is_a(list), "a list", default=[]))),
                       prompt_set=None if obj.get("prompt_set") is None else read_prompt_set_json(obj["prompt_set"]),
                       views=Views() if obj.get("views") is None else read_views(obj["views"]))
    return doc, read_field(obj, "runs", lambda v: whole(v) and v >= 0, "a count")


def _run(lines: Sequence[str | bytes], i: int, name: str) -> tuple[SavedRun, int]:
    """The run whose name line is line i (0-based), and the index of the line after its trace."""
    obj = _line(lines, i, name)
    try:
        run_id = read_field(obj, "run", whole, "a whole number")
        run_name = read_field(obj, "name", is_a(str), "text")
        steps = read_field(obj, "steps", lambda v: whole(v) and v >= 0, "a count")
        request = read_field(obj, "request", whole, "a whole number", null=True, default=None)
    except ValueError as e:
        raise SessionFormatError(f"{name}:{i + 1}: damaged run line ({e})") from None
    end = i + 1 + steps + 2  # the trace: a header, a line per step, a footer
    trace = _trace(lines[i + 1: end], name, i + 2)
    if trace.run_id != run_id:
        raise SessionFormatError(f"{name}:{i + 2}: the trace of run {run_id} says it is run {trace.run_id}")
    return SavedRun(run_name, trace, request), end


def _trace(lines: Iterable[str | bytes], name: str, first: int) -> RunTrace:
    """A trace whose first line is line `first` (1-based) of the file: errors name the file's line."""
    from app.core.record import trace as traces  # (`trace` names a run's trace here)
    from app.core.record.trace_file import TraceFormatError

    try:
        return traces.from_lines(lines, name)
    except TraceFormatError as e:
        where, _, why = str(e).removeprefix(f"{name}:").partition(": ")
        raise SessionFormatError(f"{name}:{int(where) + first - 1}: {why}") from None


def _lone_trace(lines: Sequence[str | bytes], name: str) -> SavedSession:
    """A run's trace file (`--trace`) as a session of that one run."""
    trace = _trace(lines, name, 1)
    model = trace.model or {}
    return SavedSession(prompt=trace.prompt_text, settings=trace.settings,
                        model=model.get("source", BUILTIN_NAME), backend=model.get("backend", "auto"),
                        runs=(SavedRun("", trace),), shown=trace.run_id)


def _message(obj: Any, i: int) -> Message:
    where = f"messages[{i}]."
    if not isinstance(obj, dict):
        raise ValueError(f"{where[:-1]} must be an object (a role and its content), got {brief(obj)}")
    return Message(read_field(obj, "role", lambda v: v in ROLES, f"one of {', '.join(ROLES)}", where=where),
                   read_field(obj, "content", is_a(str), "text", where=where))

