"""What the view-model has in progress: one request, or several submitted together (`generate_together`).

The first request names the window's model; a request of the group naming another model runs beside it, and its
loading, and its failure, are that request's business alone (its runs say why), not the window's. No Qt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.core.events import Failed, Finished, Request
from app.core.metrics import Metrics
from app.core.session import Session


@dataclass(frozen=True)
class Submitted:
    """The requests in progress (empty: none), the first on the window's model."""

    requests: tuple[Request, ...] = ()

    @classmethod
    def of(cls, requests: Sequence[Request]) -> Submitted:
        return cls(tuple(requests))

    def has(self, request_id: int) -> bool:
        return any(r.id == request_id for r in self.requests)

    def beside(self, request_id: int) -> bool:
        """A request of the group on another model than the first's (loaded beside the window's model)."""
        return any(r.id == request_id and r.model != self.requests[0].model for r in self.requests[1:])

    def ended(self, session: Session) -> bool:
        """Every run of every request has ended (a request whose runs are not in the session: a load)."""
        return all(not run.running for r in self.requests for run in session.of_request(r.id))


def fail_runs(session: Session, ev: Failed) -> bool:
    """The failed request's runs still going end in error, saying why; whether there were any."""
    failed = [run for run in session.of_request(ev.request_id) if run.running]
    for run in failed:
        run.finished = Finished(ev.request_id, "error", Metrics(), None, run.id, run.sequence, ev.message)
    return bool(failed)
