"""The heal verb: the prompt as typed and the prompt healed (`app.core.decoding.healing`: its last token backed off,
the text made to start with it) run together with the same settings and seed, the healed run shown; once both have
made their first step, `compared` hands those two recorded steps to the view. A prompt that cannot be healed (a chat,
a constraint already set, a single token) is refused with its line (`Playground.refused`). No widgets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground


class Healer(QObject):
    compared = Signal(object, object, str)  # the first StepTrace as typed, healed, and the backed-off text

    def __init__(self, pg: Playground, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pg = pg
        self._pair: tuple[int, int, str] | None = None  # (the run as typed, the healed run, the backed-off text)
        pg.steps_recorded.connect(self._check)

    def heal(self) -> bool:
        """Run the prompt as typed and healed, together; False (with `refused`'s line) when it cannot."""
        from app.core.decoding.healing import healed_request  # (the core's decoding: not before the first paint)

        pg = self._pg
        settings = pg.checked_settings()
        if settings is None or pg.tokenizer is None:
            return False
        typed = pg.make_request(settings.with_(seed=pg.editing.next_run_seed()))
        try:
            healed, h = healed_request(typed, pg.tokenizer)
        except ValueError as e:
            pg.refused.emit(str(e))
            return False
        self._pair = (typed.id, healed.id, h.text)
        return pg.generate_together([healed, typed])

    def _check(self) -> None:
        if self._pair is None:
            return
        typed, healed, text = self._pair
        runs = self._pg.session.runs
        if typed in runs and healed in runs and runs[typed].steps and runs[healed].steps:
            self._pair = None
            self.compared.emit(runs[typed].steps[0], runs[healed].steps[0], text)
