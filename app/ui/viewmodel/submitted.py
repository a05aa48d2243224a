"""What the view-model has in progress: one request, or several submitted together (`generate_together`).

A request of the group naming another model than the window's runs beside it, and its loading, and its failure,
are that request's business alone (its runs say why), not the window's. No Qt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.core.events import Failed, Finished, Request
from app.core.metrics import Metrics
from app.core.models.sources import ModelSpec
from app.core.session.store import Session


@dataclass(frozen=True)
class Submitted:
    """The requests in progress (empty: none), and the window's model (`main`)."""

    requests: tuple[Request, ...] = ()
    main: ModelSpec | None = None

    @classmethod
    def of(cls, requests: Sequence[Request], window: ModelSpec | None = None) -> Submitted:
        """`requests`; the window's model is `window` where one of them runs on it, else the first one's."""
        main = window if any(r.model == window for r in requests) else requests[0].model
        return cls(tuple(requests), main)

    def has(self, request_id: int) -> bool:
        return any(r.id == request_id for r in self.requests)

    def beside(self, request_id: int) -> bool:
        """A request of the group on another model than the window's (loaded beside it)."""
        return any(r.id == request_id and r.model != self.main for r in self.requests)

    def ended(self, session: Session) -> bool:
        """Every run of every request has ended (a request whose runs are not in the session: a load)."""
        return all(not run.running for r in self.requests for run in session.of_request(r.id))


def fail_runs(session: Session, ev: Failed) -> bool:
    """The failed request's runs still going end in error, saying why; whether there were any."""
    failed = [run for run in session.of_request(ev.request_id) if run.running]
    for run in failed:
        run.finished = Finished(ev.request_id, "error", Metrics(), None, run.id, run.sequence, ev.message)
    return bool(failed)
