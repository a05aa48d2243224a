"""The multiverse as a job of the model thread (its row of the runner table), refused in one line on a server, and
a node forked into a run: the run's first tokens are the node's path, after the steps of the run it looked ahead
from."""

from __future__ import annotations

import threading
from pathlib import Path

from app.core.decoding.generation import Prefix, generate
from app.core.decoding.multiverse import LookAhead
from app.core.events import Explored, ExploreDone, Failed, Finished, Request
from app.core.models.sources import ModelSpec
from app.core.runs.jobs import Job, stream
from app.core.runs.model_thread import ModelThread
from app.core.runs.multiverse_run import ExploreRequest, run_multiverse
from app.core.session.branches import path_request
from app.core.settings import SamplerSettings

SETTINGS = SamplerSettings(top_k=8, seed=5, max_tokens=6)
LOOK = LookAhead(budget=12, depth=3, width=4, rows=4)


def finished(events) -> Finished:
    return next(ev for ev in events if isinstance(ev, Finished))


def test_the_thread_grows_it_round_by_round_then_says_it_ended(tiny_path: Path) -> None:
    worker = ModelThread()
    try:
        request = ExploreRequest(model=ModelSpec(str(tiny_path), "torch"), prompt="Hello", settings=SETTINGS,
                                 look=LOOK)
        events = [ev for ev in stream(worker.start(Job("multiverse", (request,))))
                  if isinstance(ev, (Explored, ExploreDone, Failed))]
    finally:
        worker.close()
    *grew, done = events
    assert all(isinstance(ev, Explored) for ev in grew) and isinstance(done, ExploreDone)
    assert [len(ev.multiverse.nodes) for ev in grew] == sorted(len(ev.multiverse.nodes) for ev in grew)
    assert done.multiverse.reason == "budget" and done.multiverse.ranked == 12


def test_a_server_is_refused_in_one_line_before_anything_connects() -> None:
    worker = ModelThread()
    try:
        spec = ModelSpec("m", "remote", base_url="http://127.0.0.1:9/v1")
        events = list(stream(worker.start(Job("multiverse", (ExploreRequest(model=spec, prompt="x"),)))))
    finally:
        worker.close()
    assert [type(ev) for ev in events] == [Failed]
    assert "needs a local forward pass" in events[0].message and "\n" not in events[0].message


def test_a_node_forked_from_the_prompts_end_takes_its_path_first(torch_model) -> None:
    tree = [ev for ev in run_multiverse(torch_model, ExploreRequest(prompt="Hello", settings=SETTINGS, look=LOOK),
                                        threading.Event())][-1].multiverse
    node = max(tree.nodes, key=lambda n: (n.depth, n.path))
    run = finished(generate(torch_model, path_request(tree, node.id, SETTINGS), threading.Event()))
    path = list(tree.path_ids(node.id))
    assert len(path) >= 2 and run.trace.prompt_ids == list(tree.prompt_ids)
    assert run.trace.token_ids[: len(path)] == path
    assert [st.sample.token for st in run.trace.steps[: len(path)]] == path  # recorded as drawn, the path's taken


def test_a_node_forked_from_a_runs_step_keeps_the_runs_steps_before_it(torch_model) -> None:
    prefix = Prefix()
    parent = finished(generate(torch_model, Request(prompt="Hello", settings=SETTINGS), threading.Event(), prefix))
    k = 2
    request = ExploreRequest(prompt_ids=tuple(parent.trace.prompt_ids), start=tuple(parent.trace.token_ids[:k]),
                             settings=SETTINGS, look=LOOK, origin=(parent.run_id, k))
    tree = [ev for ev in run_multiverse(torch_model, request, threading.Event(), prefix)][-1].multiverse
    node = next(n for n in tree.nodes if n.depth == 2 and tree.path_ids(n.id)[0] != parent.trace.token_ids[k])
    fork = path_request(tree, node.id, SETTINGS, parent=parent.trace)
    assert fork.parent == (parent.run_id, k) and fork.branch == "fork"
    run = finished(generate(torch_model, fork, threading.Event(), prefix))
    assert run.trace.token_ids[:k] == parent.trace.token_ids[:k]
    assert run.trace.token_ids[k:k + 2] == list(tree.path_ids(node.id))
