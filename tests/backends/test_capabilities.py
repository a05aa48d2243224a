"""What a model declares it can do (`backends.base.Capabilities`), and how the core reads it instead of asking what
kind of model it has: a local model has a forward pass, trimmable and forkable caches and re-sampling; a server's
has none of them, and reports as many candidates a step as it accepts. The registry says which backends load a
folder and which connect to a server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager

import pytest

from app.core.decoding.generation import generate
from app.core.events import Failed, Finished, Loaded, Request, Step
from app.core.models.sources import ModelSpec
from app.core.remote.remote_run import load_remote
from app.core.runs.model_thread import ModelThread
from app.core.settings import SamplerSettings
from backends import connects, get_backend
from backends.base import LOCAL, ModelLoadError
from backends.remote.backend import RemoteModel
from tests.remote_fake import fake_server, stream_tokens


def test_a_local_model_declares_a_forward_pass_caches_and_resampling(model):
    assert model.capabilities == LOCAL
    assert LOCAL.forward and LOCAL.trim_fork and LOCAL.resample and LOCAL.tokenize
    assert LOCAL.reported_top_n is None


@contextmanager
def served(behave) -> Iterator[RemoteModel]:
    """The model a scripted server serves."""
    with fake_server(behave) as srv, closing(load_remote(ModelSpec(backend="remote", base_url=srv.url))) as model:
        yield model


def test_a_servers_model_declares_no_forward_pass_and_runs_through_the_same_generate():
    with served(stream_tokens(3)) as model:
        caps = model.capabilities
        events = list(generate(model, Request(prompt="hi", settings=SamplerSettings(max_tokens=3)), threading.Event()))
    assert not (caps.forward or caps.trim_fork or caps.resample or caps.tokenize)
    assert not hasattr(model, "forward") and not hasattr(model, "new_cache")  # no methods that raise
    assert len([e for e in events if isinstance(e, Step)]) == 3


def test_a_server_that_caps_its_top_logprobs_reports_that_many():
    def capped(h, body: dict) -> None:
        n = body.get("top_logprobs", body.get("logprobs"))
        if isinstance(n, int) and not isinstance(n, bool) and n > 5:
            h.answer(400, {"error": {"message": "top_logprobs must be at most 5"}})
        else:
            stream_tokens(2)(h, body)

    with served(capped) as model:
        assert model.capabilities.reported_top_n is None  # nothing refused yet
        list(generate(model, Request(prompt="hi", settings=SamplerSettings(max_tokens=2), top_n=20), threading.Event()))
        assert model.capabilities.reported_top_n == 5


def test_the_registry_says_which_backends_connect_to_a_server():
    assert connects("remote") and not connects("torch") and not connects("mlx") and not connects("auto")
    with pytest.raises(ModelLoadError, match="connects to a server: give a base URL"):
        get_backend("remote")


def test_the_model_thread_tells_a_servers_model_by_its_capabilities():
    """No tokenizer is handed on for a server's model (it cannot encode here), loaded now or before; a prompt's
    surprisal is refused in one line, even for a prompt given as token ids."""
    with fake_server(stream_tokens(2)) as srv:
        spec = ModelSpec(source="", backend="remote", base_url=srv.url)
        worker = ModelThread()
        try:
            worker.submit(Request(model=spec, prompt="hi"), load_only=True)
            worker.submit(Request(model=spec, prompt="hi"), load_only=True)
            worker.score(Request(model=spec, prompt_ids=(1, 2, 3)))
            worker.submit(Request(model=spec, prompt="hi", settings=SamplerSettings(max_tokens=2)))
            events = []
            while not any(isinstance(e, Finished) for e in events):
                events.append(worker.events.get(timeout=10))
        finally:
            worker.close()
    loaded = [e for e in events if isinstance(e, Loaded)]
    assert len(loaded) == 2 and all(e.tokenizer is None for e in loaded)
    failed = [e for e in events if isinstance(e, Failed)]
    assert [e.message for e in failed] == ["a model on a server has no local forward pass (no KV cache, no logits "
                                           "over a prompt)"]
