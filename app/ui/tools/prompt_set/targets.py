"""What a prompt set runs against: the window's settings, the side-by-side view's columns (each as its form holds
it, on the column's model), or the sweep's selected cell. Each is a `Target`, a label, the settings a run takes and
its model (None: the window's); the labels are the core's (`prompt_sets.settings_label`). Asks the other views
only through their public methods (`SideBySideView.targets`, `SweepView.selected_cell`) and changes nothing; a choice
that names no settings yet raises `SettingsError` with one line that says what to do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core.compare.job_plan import Target
from app.core.compare.prompt_sets import label_names, settings_label
from app.core.models.sources import ModelSpec
from app.core.settings import SamplerSettings, SettingsError

if TYPE_CHECKING:
    from app.ui.tools.side_by_side.view import SideBySideView
    from app.ui.tools.sweep_view import SweepView

WINDOW, COLUMNS, SWEEP_CELL = "the window's settings", "the side-by-side columns", "the sweep's selected cell"
SOURCES = (WINDOW, COLUMNS, SWEEP_CELL)


def window_targets(settings: SamplerSettings) -> list[Target]:
    """The window's settings (with the run's seed) as the one target."""
    return [Target(settings_label(settings, label_names([settings])), settings)]


def column_targets(side: SideBySideView | None, base: SamplerSettings, window: ModelSpec) -> list[Target]:
    """One target per shown column of the side-by-side view (`SideBySideView.targets`: `base` with the column form's
    values, on the column's model, `window` the window's)."""
    if side is None:
        raise SettingsError("no side-by-side columns yet: open Run ▸ Side by side… and set its columns")
    return side.targets(base, window)  # a SettingsError names the value that is not valid


def sweep_cell_targets(sweep: SweepView | None) -> list[Target]:
    """The sweep's current cell (the one clicked or selected) as the one target, labelled by its swept values."""
    if sweep is None or not sweep.cells:
        raise SettingsError("no sweep cell yet: run Run ▸ Sweep… and click one of its cells")
    cell = sweep.selected_cell()
    if cell is None:
        raise SettingsError("no sweep cell selected: click one of the sweep's cells")
    return [Target(settings_label(cell.settings, tuple(cell.values)), cell.settings)]
