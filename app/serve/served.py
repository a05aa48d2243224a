"""What a host tells its observer (the window) of each request it runs: a `Served` notice when the job is queued,
before any of its events, then every event of the job as the model thread puts it, on one thread-safe queue. The
observer drains that queue on its own thread (the window: its router's timer); nothing here calls back into it.
Plain data, no imports beyond the core's events: the window's router reads it before the server is ever started.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.events import Request


@dataclass(frozen=True)
class Served:
    """A request the server took: its runs (request.run_ids), its name in the session (the route, and any field not
    applied), who sent it (host:port), and when (time.time())."""

    request: Request
    name: str
    client: str
    at: float

    @property
    def route(self) -> str:
        """The route alone (the name without what it did not apply)."""
        return self.name.split(" · ", 1)[0]
