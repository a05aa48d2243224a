"""What the user is editing, in one object: the prompt (text, chat messages, which of the two), the sampler
settings (and whether the seed is locked), the model to run, and the selection (the run shown, the step pinned).

Widgets bind to it as napari's `qt_dims` binds to its `Dims`: they write it on an edit and follow its `*_changed`
signals, and no widget reaches into another. Requests, fork, replay, sessions, preferences and View code read it.
Each setter emits only when the value changes, so a widget that writes what it shows is not redrawn in a loop.
It holds values only: no widget, no model, no run in progress, no process-wide state.
"""

from __future__ import annotations

import random
from dataclasses import astuple, dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.core.events import Message
from app.core.models.sources import ModelSpec
from app.core.settings import SamplerSettings, SettingsError

if TYPE_CHECKING:
    from app.core.session.store import Run

UI_MAX_SEED = 2**31 - 1  # the seed box is a QSpinBox: a signed 32-bit int


@dataclass(frozen=True)
class Prompt:
    """The prompt as edited: the completion text, the chat's messages (system first), and which one a run uses."""

    text: str = ""
    messages: tuple[Message, ...] = ()
    chat: bool = False

    @property
    def chat_messages(self) -> tuple[Message, ...] | None:
        """What a request sends as its messages: the chat's in chat mode, else None (the text is the prompt)."""
        return self.messages if self.chat else None


class EditingState(QObject):
    prompt_changed = Signal(object)  # Prompt
    settings_changed = Signal(object)  # SamplerSettings (the last valid; `settings_error` says if the edit is not)
    seed_lock_changed = Signal(bool)
    model_changed = Signal(object)  # ModelSpec
    selection_changed = Signal()  # the run shown or the step pinned changed (`run`, `step`)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._prompt = Prompt()
        self._settings = SamplerSettings(seed=random.randrange(UI_MAX_SEED))
        self._settings_error = ""
        self._seed_locked = True
        self._model = ModelSpec()
        self._run: Run | None = None
        self._step: int | None = None

    # prompt -----------------------------------------------------------------------------------------------
    @property
    def prompt(self) -> Prompt:
        return self._prompt

    def set_prompt(self, prompt: Prompt) -> None:
        if prompt != self._prompt:
            self._prompt = prompt
            self.prompt_changed.emit(prompt)

    # settings ---------------------------------------------------------------------------------------------
    @property
    def settings(self) -> SamplerSettings:
        """The last valid settings edited (see `valid_settings` for a request)."""
        return self._settings

    @property
    def settings_error(self) -> str:
        """Why the settings as edited now are not valid ("": they are)."""
        return self._settings_error

    def set_settings(self, settings: SamplerSettings) -> None:
        """Take `settings`; a seed of None keeps the seed, one past what the seed box holds is cut to it."""
        seed = self._settings.seed if settings.seed is None else min(settings.seed, UI_MAX_SEED)
        settings = settings.with_(seed=seed)
        self._settings_error = ""
        if settings != self._settings:
            self._settings = settings
            self.settings_changed.emit(settings)

    def set_settings_error(self, message: str) -> None:
        """The edit in progress is not a valid `SamplerSettings`: a request is refused with `message` until fixed."""
        self._settings_error = message

    def valid_settings(self) -> SamplerSettings:
        """The settings for a run; raises `SettingsError` while the edit is not valid."""
        if self._settings_error:
            raise SettingsError(self._settings_error)
        return self._settings

    @property
    def seed_locked(self) -> bool:
        """Locked: every run uses the seed shown; unlocked: each run draws a new one."""
        return self._seed_locked

    def set_seed_locked(self, locked: bool) -> None:
        if locked != self._seed_locked:
            self._seed_locked = locked
            self.seed_lock_changed.emit(locked)

    def new_seed(self) -> None:
        self.set_settings(self._settings.with_(seed=random.randrange(UI_MAX_SEED)))

    def next_run_seed(self) -> int:
        """The seed for the next run: the one shown if locked, else a fresh one (shown from now on)."""
        if not self._seed_locked:
            self.new_seed()
        return self._settings.seed

    # model ------------------------------------------------------------------------------------------------
    @property
    def model(self) -> ModelSpec:
        return self._model

    def set_model(self, spec: ModelSpec) -> None:
        if astuple(spec) != astuple(self._model):  # every field: `==` leaves out offline and concurrency
            self._model = spec
            self.model_changed.emit(spec)

    # selection --------------------------------------------------------------------------------------------
    @property
    def run(self) -> Run | None:
        """The run the views show (None: nothing is shown)."""
        return self._run

    @property
    def step(self) -> int | None:
        """The step pinned in the run shown (None: follow the latest)."""
        return self._step

    def select(self, run: Run | None, step: int | None = None) -> None:
        if run is not self._run or step != self._step:
            self._run, self._step = run, step
            self.selection_changed.emit()
