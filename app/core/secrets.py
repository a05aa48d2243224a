"""API keys for remote servers, one per base URL: in the OS keychain through `keyring`, or, where no keychain
backend exists, in this process's memory for the session only (and `store_key` says so).

A key is read from a named environment variable first (`--api-key-env`), then the keychain, then the session.
Keys are never written to preferences, session files, traces or logs: this module is the only place that holds one.
"""

from __future__ import annotations

import contextlib
import os
import threading

from backends.base import ModelLoadError

SERVICE = "logitlab"
_session: dict[str, str] = {}
_lock = threading.Lock()


class MissingKeyError(ModelLoadError):
    """An environment variable named for a key that does not hold one."""


def keychain() -> object | None:
    """The keyring backend when a real one is available (not keyring's 'fail' or 'null' stand-ins)."""
    try:
        import keyring
        from keyring.backends import chainer, fail
    except ImportError:
        return None
    backend = keyring.get_keyring()
    if isinstance(backend, fail.Keyring) or type(backend).__module__.startswith("keyring.backends.null"):
        return None
    if isinstance(backend, chainer.ChainerBackend) and not backend.backends:
        return None
    return backend


def store_key(base_url: str, key: str) -> str:
    """Keep `key` for `base_url`; returns a sentence saying where (the keychain, or this session only)."""
    with _lock:
        _session[base_url] = key
    backend = keychain()
    if backend is None:
        return "no keychain is available on this system: the key is kept for this session only"
    try:
        backend.set_password(SERVICE, base_url, key)  # type: ignore[attr-defined]
    except Exception as e:  # noqa: BLE001 - every keyring backend raises its own errors
        return f"the keychain refused the key ({type(e).__name__}): it is kept for this session only"
    return "the key is saved in the system keychain"


def forget_key(base_url: str) -> None:
    with _lock:
        _session.pop(base_url, None)
    backend = keychain()
    if backend is not None:
        with contextlib.suppress(Exception):  # nothing stored there: nothing to forget
            backend.delete_password(SERVICE, base_url)  # type: ignore[attr-defined]


def api_key(base_url: str, env: str | None = None) -> str | None:
    """The key for `base_url`: from the environment variable `env` when named, else the keychain or session."""
    if env:
        value = os.environ.get(env, "").strip()
        if not value:
            raise MissingKeyError(f"the environment variable {env} holds no API key")
        return value
    with _lock:
        if base_url in _session:
            return _session[base_url]
    backend = keychain()
    if backend is None:
        return None
    try:
        return backend.get_password(SERVICE, base_url)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a locked or broken keychain: as if no key were stored
        return None
