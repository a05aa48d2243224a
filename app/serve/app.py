"""The ASGI app (Starlette): /v1/models, /v1/chat/completions, /v1/completions and /v1/responses over a `Host`,
streamed as server-sent events or answered whole, each answer carrying its runs' ids (the X-Logitlab-Run header and
the `logitlab` field). An API key, where set, is compared in constant time. Every refusal is OpenAI's error shape
with a 4xx and a line naming the field; nothing a request sends escapes as a 500 of ours unanswered.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.core.events import Event, Failed, Scored
from app.serve.answers import Answer
from app.serve.calls import MAX_BODY, Call, parse_body, read_call
from app.serve.fields import RequestError
from app.serve.host import Host, events

log = logging.getLogger(__name__)
RUN_HEADER = "X-Logitlab-Run"


def make_app(host: Host, api_key: str | None = None) -> Starlette:
    """The app serving `host`'s model; with `api_key`, every route asks for `Authorization: Bearer KEY`."""

    async def models(request: HttpRequest) -> Response:
        try:
            _check_key(request, api_key)
        except RequestError as e:
            return _error(e)
        return _json({"object": "list", "data": [{"id": host.name, "object": "model", "created": 0,
                                                  "owned_by": "logitlab"}]})

    def route(kind: str) -> Callable[[HttpRequest], Awaitable[Response]]:
        async def endpoint(request: HttpRequest) -> Response:
            try:
                _check_key(request, api_key)
                call = read_call(kind, parse_body(await _body(request)), host.spec, host.name,
                                 host.info.vocab_size if host.info else 0)
                return await (_stream(host, call, request) if call.stream else _whole(host, call, request))
            except RequestError as e:
                return _error(e)
            except Exception as e:
                log.exception("the server failed on a request")
                return _error(RequestError(f"the server failed: {type(e).__name__}: {e}", status=500,
                                           kind="server_error"))

        return endpoint

    routes = [Route("/v1/models", models, methods=["GET"]),
              Route("/v1/chat/completions", route("chat"), methods=["POST"]),
              Route("/v1/completions", route("completions"), methods=["POST"]),
              Route("/v1/responses", route("responses"), methods=["POST"])]
    return Starlette(routes=routes)


def _check_key(request: HttpRequest, key: str | None) -> None:
    if key is None:
        return
    given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(given.encode(), key.encode()):
        raise RequestError("a valid API key is needed: Authorization: Bearer KEY", status=401,
                           kind="authentication_error")


async def _body(request: HttpRequest) -> bytes:
    """The body, read no further than MAX_BODY."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise RequestError(f"the body is over {MAX_BODY // 2**20} MiB", status=413)
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_BODY:
            raise RequestError(f"the body is over {MAX_BODY // 2**20} MiB", status=413)
    return bytes(data)


async def _events(host: Host, call: Call, request: HttpRequest, kind: str = "plain") -> AsyncIterator[Event]:
    client = f"{request.client.host}:{request.client.port}" if request.client else ""
    job, relay = host.start(kind, call.request, call.name, client)
    async for event in events(job, relay, request.is_disconnected):
        yield event


async def _score(host: Host, call: Call, request: HttpRequest) -> Scored | None:
    """The prompt's own log-probabilities (echo): the score runner's all-positions forward."""
    async for event in _events(host, call, request, "score"):
        if isinstance(event, Scored):
            return event
        if isinstance(event, Failed):
            raise RequestError(event.message)
    return None


async def _whole(host: Host, call: Call, request: HttpRequest) -> Response:
    answer = Answer(call, host.name, host.tokenizer, await _score(host, call, request) if call.echo else None)
    if call.generate:
        async for event in _events(host, call, request):
            if isinstance(event, Failed):
                raise _failure(event)
            answer.take(event)
    return _json(answer.whole(), call)


async def _stream(host: Host, call: Call, request: HttpRequest) -> Response:
    answer = Answer(call, host.name, host.tokenizer, await _score(host, call, request) if call.echo else None)
    source = _events(host, call, request) if call.generate else _nothing()
    first = await anext(source, None)  # a refusal before any token (a prompt too long) is still a 4xx
    if isinstance(first, Failed):
        raise _failure(first)

    async def body() -> AsyncIterator[bytes]:
        try:
            if not call.generate:
                for chunk in answer.opening():
                    yield _sse(chunk, call)
            for event in (first,) if first is not None else ():
                for chunk in answer.take(event):
                    yield _sse(chunk, call)
            async for event in source:
                chunks = [{"error": _error_body(_failure(event))}] if isinstance(event, Failed) else answer.take(event)
                for chunk in chunks:
                    yield _sse(chunk, call)
            for chunk in answer.closing():
                yield _sse(chunk, call)
            if call.route != "responses":
                yield b"data: [DONE]\n\n"
        finally:
            await source.aclose()  # (a client gone: this cancels the job)

    headers = {RUN_HEADER: _runs(call), "Cache-Control": "no-cache"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


async def _nothing() -> AsyncIterator[Event]:
    return
    yield


def _failure(event: Failed) -> RequestError:
    unexpected = event.message.startswith("unexpected error")
    return RequestError(event.message, status=500 if unexpected else 400,
                        kind="server_error" if unexpected else "invalid_request_error")


def _sse(chunk: dict[str, Any], call: Call) -> bytes:
    event = f"event: {chunk['type']}\n" if call.route == "responses" and "type" in chunk else ""
    return f"{event}data: {json.dumps(chunk, ensure_ascii=False, allow_nan=False)}\n\n".encode()


def _runs(call: Call) -> str:
    return ",".join(str(r) for r in call.request.run_ids)


def _json(body: dict[str, Any], call: Call | None = None) -> Response:
    return JSONResponse(body, headers={RUN_HEADER: _runs(call)} if call is not None else None)


def _error_body(e: RequestError) -> dict[str, Any]:
    return {"message": str(e), "type": e.kind, "param": e.param, "code": None}


def _error(e: RequestError) -> Response:
    return JSONResponse({"error": _error_body(e)}, status_code=e.status)
