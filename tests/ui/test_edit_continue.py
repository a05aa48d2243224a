"""Edit and continue: the output made editable, Ctrl+Enter starts a run from the edited text (a child marked "edit",
prefilled from the cached prefix), Esc cancels, Undo takes the edit back. The editor alone, then the real window."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor

from app.core.session.edits import EDIT
from app.ui.formatting import INHERITED
from app.ui.main_window import MainWindow
from app.ui.run_view.branch_tree import RUN_ID
from app.ui.run_view.output_editor import EDITED, EDITED_BACKGROUND, OutputEditor
from app.ui.run_view.token_view import TokenText

RUN_TIMEOUT = 60_000
SHADE = QColor(120, 200, 120, 160)


def shaded_text(pieces: list[str], end_mark: str = " [max tokens]") -> TokenText:
    """An output view holding `pieces` as token spans on one shade, and an end mark after them."""
    t = TokenText()
    fmt = QTextCharFormat()
    fmt.setBackground(SHADE)
    cur = QTextCursor(t.document())
    for p in pieces:
        t.insert_span(cur, p, fmt)
    cur.insertText(end_mark)
    return t


def test_the_editor_edits_the_tokens_only_with_their_shading_and_marks_what_is_typed(qtbot):
    t = shaded_text(["def", " f", "(x", "):"])
    qtbot.addWidget(t)
    ed = OutputEditor()
    qtbot.addWidget(ed)
    ed.start(t.document(), *t.output_range(), at=3)
    assert ed.toPlainText() == ed.shown == "def f(x):"  # no end mark
    qtbot.keyClicks(ed, "ine")
    assert ed.toPlainText() == "define f(x):"
    cur = QTextCursor(ed.document())
    cur.setPosition(2)  # the format of the character before: "e" of "def", as it was
    assert cur.charFormat().background().color() == SHADE
    cur.setPosition(5)  # "n", typed
    assert cur.charFormat().foreground().color() == EDITED
    assert cur.charFormat().background().color() == EDITED_BACKGROUND  # not the shade of the token it is in
    qtbot.keyClick(ed, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)  # its own undo
    assert ed.toPlainText() == "def f(x):"
    assert t.toPlainText() == "def f(x): [max tokens]"  # the output itself untouched


def test_ctrl_enter_continues_with_the_text_and_esc_cancels(qtbot):
    t = shaded_text(["a", "b"])
    ed = OutputEditor()
    qtbot.addWidget(ed)
    ed.start(t.document(), *t.output_range())
    qtbot.keyClicks(ed, "c")
    with qtbot.waitSignal(ed.continued) as got:
        qtbot.keyClick(ed, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert got.args == ["abc"]
    with qtbot.waitSignal(ed.cancelled):
        qtbot.keyClick(ed, Qt.Key.Key_Escape)
    qtbot.keyClick(ed, Qt.Key.Key_Return)  # a plain Enter is a line break
    assert ed.toPlainText() == "abc\n"


def test_an_edit_given_back_changes_only_what_differs(qtbot):
    t = shaded_text(["one", " two", " three"])
    ed = OutputEditor()
    qtbot.addWidget(ed)
    ed.start(t.document(), *t.output_range())
    ed.replace_text("one 2 three")
    assert ed.toPlainText() == "one 2 three"
    cur = QTextCursor(ed.document())
    cur.setPosition(5)
    assert cur.charFormat().foreground().color() == EDITED
    cur.setPosition(8)  # "t" of "three": the run's, shaded
    assert cur.charFormat().background().color() == SHADE


def first_run(qtbot, w: MainWindow) -> object:
    """A 16-token sampled, seeded run that only max tokens ends."""
    w.prompt.set_prompt("Hello there")
    w.sampler.editors["max_tokens"].setValue(16)
    w.sampler.editors["temperature"].setValue(1.0)
    with qtbot.waitSignal(w.playground.finished, timeout=RUN_TIMEOUT) as done:
        assert w.playground.generate(replace(w.playground.make_request(), ignore_eos=True))
    qtbot.waitUntil(lambda: not w.playground.busy, timeout=RUN_TIMEOUT)
    return done.args[0].trace


def clean_cut(tok: object, trace: object, most: int) -> int:
    """The most tokens, up to `most`, after which the output may be cut: the last shows text of its own and they
    decode to the text shown (a random model draws stray bytes: a token may hold part of a character)."""
    shown = lambda k: tok.decode(trace.prompt_ids) + "".join(s.text for s in trace.steps[:k])
    return next(k for k in range(most, 0, -1)
                if trace.steps[k - 1].text and tok.decode(trace.prompt_ids + trace.token_ids[:k]) == shown(k))


def test_an_edit_continues_as_a_child_run_prefilled_from_the_cached_prefix(qtbot, window, tmp_path):
    root = first_run(qtbot, window)
    pg, view = window.playground, window.output
    assert view.edit.bar.edit.isEnabled()
    qtbot.mouseClick(view.edit.bar.edit, Qt.MouseButton.LeftButton)
    assert view.edit.editing and view.edit.editor.toPlainText() == root.text
    k = clean_cut(pg.tokenizer, root, 10)  # keep the first k tokens, retype the rest
    cut = len("".join(s.text for s in root.steps[:k]))
    cur = view.edit.editor.textCursor()
    cur.setPosition(cut)
    cur.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
    view.edit.editor.setTextCursor(cur)
    qtbot.keyClicks(view.edit.editor, " = edit")
    edited = root.text[:cut] + " = edit"
    new = len(pg.tokenizer.encode(" = edit", add_special_tokens=False))
    qtbot.waitUntil(lambda: f"keeps the run's first {k} tokens, {new} new" in view.branch_note.text())
    runs_before = len(pg.session.runs)
    with qtbot.waitSignal(pg.finished, timeout=RUN_TIMEOUT) as done:
        qtbot.keyClick(view.edit.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not pg.busy, timeout=RUN_TIMEOUT)
    qtbot.wait(10)  # the tree redraws on the next turn of the event loop
    assert len(pg.session.runs) == runs_before + 1  # Ctrl+Enter continued the edit; Generate did not run too
    run = pg.session.get(done.args[0].run_id)
    tail = pg.tokenizer.encode(edited[cut:], add_special_tokens=False)
    kept = run.parent[1]
    assert run.trace.branch == EDIT and run.parent == (root.run_id, kept) and kept == k
    assert run.trace.prompt_ids == root.prompt_ids + root.token_ids[:k] + tail
    reused = run.finished.metrics.reused_tokens
    assert reused == len(root.prompt_ids) + k  # everything before the first changed token came from the cache
    assert f"({reused} cached)" in window.metrics.values["tokens"].text()
    assert not view.edit.editing and view.text.toPlainText().startswith(edited + run.trace.text)
    start = QTextCursor(view.text.document())
    start.setPosition(1)
    assert start.charFormat().foreground().color() == INHERITED  # the kept text, grey
    start.setPosition(cut + 2)
    assert start.charFormat().foreground().color() == EDITED  # what was typed
    item = window.branches.item_of(run.id)
    assert item.parent().data(0, RUN_ID) == root.run_id and item.text(0).startswith(f"edit @{k}: ")

    assert window.sessions.save_as(tmp_path / "edit.jsonl") and window.sessions.new()  # a session keeps the edit
    assert window.sessions.open(tmp_path / "edit.jsonl")
    back = pg.session.get(run.id)
    assert back.trace.branch == EDIT and back.parent == run.parent and back.trace.prompt_ids == run.trace.prompt_ids
    window.branches.tree.setCurrentItem(window.branches.item_of(root.run_id))
    window.branches.tree.setCurrentItem(window.branches.item_of(run.id))
    assert pg.shown is back and view.text.toPlainText().startswith(edited + run.trace.text)


def test_esc_cancels_the_edit_and_undo_takes_an_edit_back_to_the_editor(qtbot, window):
    root = first_run(qtbot, window)
    pg, view = window.playground, window.output
    shown = view.text.toPlainText()
    assert view.edit.start()
    qtbot.keyClicks(view.edit.editor, "!!")
    qtbot.keyClick(view.edit.editor, Qt.Key.Key_Escape)
    assert not view.edit.editing and view.text.toPlainText() == shown and not pg.busy  # Esc stopped nothing either
    assert view.edit.start()
    qtbot.keyClicks(view.edit.editor, " more")
    tokenizer, pg.tokenizer = pg.tokenizer, None  # as before the model has loaded (a session opened to look)
    qtbot.mouseClick(view.edit.bar.go, Qt.MouseButton.LeftButton)
    pg.tokenizer = tokenizer
    assert "not loaded" in window.banner.label.text() and len(pg.session.runs) == 1  # refused, with a reason
    assert view.edit.editing and view.edit.editor.toPlainText() == root.text + " more"  # nothing typed is lost
    with qtbot.waitSignal(pg.finished, timeout=RUN_TIMEOUT) as done:
        qtbot.mouseClick(view.edit.bar.go, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not pg.busy, timeout=RUN_TIMEOUT)
    edit = done.args[0].run_id
    assert pg.session.get(edit).parent == (root.run_id, clean_cut(pg.tokenizer, root, len(root.steps)))  # all kept
    assert pg.branches.undo_label == "Undo edit"  # (the tree's menu says so)
    view.text.setFocus()
    qtbot.keyClick(view.text, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)  # Edit → Undo
    assert edit not in pg.session.runs and pg.shown.id == root.run_id
    assert view.edit.editing and view.edit.editor.toPlainText() == root.text + " more"  # the edit, to go on with


def test_what_qt_shows_differently_is_continued_as_recorded(qtbot):
    t = shaded_text(["a\u00a0b", " c"])  # a no-break space: Qt's plain text makes it a space
    ed = OutputEditor()
    qtbot.addWidget(ed)
    ed.start(t.document(), *t.output_range())
    qtbot.keyClicks(ed, "d")
    assert ed.shown == "a b c" and ed.toPlainText() == "a b cd"
    assert ed.as_recorded(ed.toPlainText(), "a\u00a0b c") == "a\u00a0b cd"
    assert ed.as_recorded("x", "a\u00a0b c") == "x"  # all changed: as typed
