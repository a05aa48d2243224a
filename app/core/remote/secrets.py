"""API keys for remote servers, one per base URL: in the OS keychain through `keyring`, or, where no keychain
backend exists, in this process's memory for the session only (and `store_key` says so).

A key is read from a named environment variable first (`--api-key-env`), then the keychain, then the session.
Keys are never written to preferences, session files, traces or logs: this module is the only place that holds one.
Each key it hands out or keeps is also given to `backends.remote.http.keep_secret`, so that no message quoting a
server (which may echo it) shows it. A base URL's user:password is no part of the name a key is kept under.
"""

from __future__ import annotations

import contextlib
import os
import threading

from backends.base import ModelLoadError
from backends.remote.http import RemoteError, _credentials, _hide_userinfo, keep_secret, normalize_url, redact

__all__ = ["MissingKeyError", "account", "api_key", "forget_key", "keychain", "redact", "store_key"]

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


def account(base_url: str) -> str:
    """The name a key is kept under: the base URL as the backend reads it (`http://host:8000` and
    `http://host:8000/v1/` are one server), without a user:password (which would show in the keychain)."""
    try:
        return _credentials(normalize_url(base_url))[0]
    except (RemoteError, ValueError):
        return _hide_userinfo(base_url.strip())


def store_key(base_url: str, key: str) -> str:
    """Keep `key` for `base_url`; returns a sentence saying where (the keychain, or this session only)."""
    key = key.strip()
    keep_secret(key)
    name = account(base_url)
    with _lock:
        _session[name] = key
    backend = keychain()
    if backend is None:
        return "no keychain is available on this system: the key is kept for this session only"
    try:
        backend.set_password(SERVICE, name, key)  # type: ignore[attr-defined]
    except Exception as e:  # noqa: BLE001 - every keyring backend raises its own errors
        return f"the keychain refused the key ({type(e).__name__}): it is kept for this session only"
    return "the key is saved in the system keychain"


def forget_key(base_url: str) -> None:
    names = {account(base_url), base_url}  # (and a key kept under the URL as typed, before `account`)
    with _lock:
        for name in names:
            _session.pop(name, None)
    backend = keychain()
    if backend is not None:
        for name in names:
            with contextlib.suppress(Exception):  # nothing stored there: nothing to forget
                backend.delete_password(SERVICE, name)  # type: ignore[attr-defined]


def api_key(base_url: str, env: str | None = None) -> str | None:
    """The key for `base_url`: from the environment variable `env` when named, else the keychain or session."""
    if env:
        value = os.environ.get(env, "").strip()
        if not value:
            raise MissingKeyError(f"the environment variable {env} holds no API key")
        keep_secret(value)
        return value
    names = list(dict.fromkeys((account(base_url), base_url)))  # (a key kept under the URL as typed, before)
    with _lock:
        for name in names:
            if name in _session:
                keep_secret(_session[name])
                return _session[name]
    backend = keychain()
    if backend is None:
        return None
    for name in names:
        try:
            key = backend.get_password(SERVICE, name)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - a locked or broken keychain: as if no key were stored
            return None
        if key:
            keep_secret(key)
            return key
    return None
