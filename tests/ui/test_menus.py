"""Edit and Help menus of the real window: copy the output (exactly, and as Markdown), undo / redo in the
prompt, select all, the About dialog (version, libraries, licences, where things live) and the shortcuts."""

from __future__ import annotations

import re
from importlib import metadata

from PySide6.QtCore import QCoreApplication, QEvent
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMenu

import app
from app.core.record.export import describe
from app.ui.files.about import LIBRARIES, AboutDialog, ShortcutsDialog
from app.ui.files.clipboard import fenced
from tests.ui.conftest import RUN_TIMEOUT


def action(menu: QMenu, text: str):
    return next(a for a in menu.actions() if a.text().replace("&", "") == text)


def run(qtbot, w, prompt: str = "def f(x):", n: int = 12):
    w.prompt.set_prompt(prompt)
    w.sampler.editors["max_tokens"].setValue(n)
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT) as done:
        w.generate()
    return done.args[0]


def test_copy_output_puts_the_runs_text_on_the_clipboard_exactly(qtbot, window):
    run(qtbot, window)
    action(window.edit_menu, "Copy output").trigger()
    text = "".join(s.text for s in window.playground.steps)
    assert text and QGuiApplication.clipboard().text() == text


def test_copy_output_as_markdown_says_what_made_it(qtbot, window):
    fin = run(qtbot, window, prompt="x = 1  # ```")
    action(window.edit_menu, "Copy output as Markdown").trigger()
    md = QGuiApplication.clipboard().text()
    shown = window.playground.shown
    out = "".join(s.text for s in shown.steps)
    assert md.startswith(f"**Prompt** ({shown.request.model.label})\n\n````text\nx = 1  # ```\n````\n")
    assert (f"**Output** ({describe(shown.request.settings)} · seed {shown.prefilled.seed}; {len(shown.steps)} "
            f"tokens, finished by {fin.reason})") in md
    assert md.endswith("\n".join(fenced(out)) + "\n")


def test_a_fence_is_longer_than_any_backticks_inside():
    assert fenced("a ``` b ```` c") == ["`````text", "a ``` b ```` c", "`````"]
    assert fenced("plain") == ["```text", "plain", "```"]


def test_undo_and_redo_act_on_the_prompt(qtbot, window):
    window.prompt.set_prompt("")
    window.prompt.completion.setFocus()
    qtbot.keyClicks(window.prompt.completion, "hello")
    window.sampler.setFocus()  # the menu acts on the prompt wherever the focus is now
    action(window.edit_menu, "Undo").trigger()
    assert window.prompt.prompt() == ""
    action(window.edit_menu, "Redo").trigger()
    assert window.prompt.prompt() == "hello"


def test_select_all_selects_the_output_when_no_text_field_has_focus(qtbot, window):
    run(qtbot, window)
    window.controls.generate_button.setFocus()
    action(window.edit_menu, "Select All").trigger()
    cursor = window.output.text.textCursor()
    assert cursor.selectionStart() == 0 and cursor.selectionEnd() == len(window.output.text.toPlainText()) > 0


def test_about_names_the_version_the_libraries_and_where_things_live(qtbot, window, store):
    action(window.help_menu, "About Logit Lab").trigger()
    dialog = window.findChild(AboutDialog)
    assert dialog is not None and dialog.isVisible()  # open, not blocking the window
    text = re.sub(r"<[^>]+>", " ", dialog.text.text())
    assert f"Logit Lab {app.__version__}" in text
    for dist, _role, licence in LIBRARIES:
        version = metadata.version(dist) if _installed(dist) else "not installed"
        assert re.search(rf"{re.escape(dist)}\s+{re.escape(version)}\s+{re.escape(licence)}", text), dist
    assert store.fileName() in text and "Hugging Face cache" in text
    dialog.close()


def _installed(dist: str) -> bool:
    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def test_the_shortcuts_dialog_lists_every_menu_shortcut(qtbot, window):
    action(window.help_menu, "Keyboard shortcuts").trigger()
    dialog = window.findChild(ShortcutsDialog)
    rows = dict(dialog.rows)
    assert rows["Run → Generate"].startswith("Ctrl+Return")
    assert rows["Run → Stop"] == "Esc"
    assert rows["Edit → Copy output"] == "Ctrl+Shift+C"
    assert rows["Edit → Copy output as Markdown"] == "Ctrl+Alt+C"
    assert "File → Export" not in rows  # a submenu is walked, not listed
    dialog.close()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert window.findChild(ShortcutsDialog) is None  # freed once closed: dialogs do not pile up
