"""`logitlab serve`: an OpenAI-compatible HTTP server (Starlette + uvicorn) over the one model thread. A request
becomes a `Request` run by the same runners as the window's (`app.core.runs`), and a run in a session file; the
HTTP layer parses, validates and shapes answers, and holds no sampling. No Qt; the window's Server tool imports it
(when started) and reads what it served from an observer queue (served.py).
"""
