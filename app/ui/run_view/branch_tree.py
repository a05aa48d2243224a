"""The branch tree: the session's runs as a tree (as Loom draws its generation tree), one node per run under the
run it branched from. A node reads its name (or first tokens), where it branched and with which token, and how
its settings differ from its parent's. Click (or move with the arrow keys) to show a run; double-click or F2 to
rename; Delete to delete a run and its branches. It draws the view-model's session and calls its verbs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import QAbstractItemView, QMenu, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from app.core.record.export import order_text
from app.core.session.edits import EDIT
from app.core.session.store import Run
from app.core.settings import FIELDS, SamplerSettings
from app.ui.formatting import visible

if TYPE_CHECKING:
    from app.ui.viewmodel.playground import Playground

LABEL_TOKENS = 8  # tokens of a branch's own text in its label
RUN_ID = Qt.ItemDataRole.UserRole


def settings_diff(parent: SamplerSettings, child: SamplerSettings) -> str:
    """The settings a branch changed from its parent's, in a few words ("temperature 0.8→0.5, top_k 40→3")."""
    out = []
    for f in FIELDS:
        a, b = getattr(parent, f.name), getattr(child, f.name)
        if a != b and f.name != "seed":
            out.append(f"{f.label.lower()} {_short(a)}→{_short(b)}")
    if parent.stage_order != child.stage_order:  # an old order, an engine's or a custom chain
        out.append(f"order → {order_text(child)}")
    return ", ".join(out)


def _short(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def node_label(run: Run, parent: Run | None) -> str:
    """What a node says: how it branched ("fork @5: "), then its name or its first own tokens."""
    return _prefix(run, parent) + (run.name or _own_text(run))


def _prefix(run: Run, parent: Run | None) -> str:
    if run.parent is None or parent is None:
        return ""
    kind = run.request.branch or (run.trace.branch if run.trace is not None else "") or "branch"
    return f"{kind} @{run.parent[1]}: "


def _own_text(run: Run) -> str:
    k = run.parent[1] if run.parent is not None and run.request.branch != EDIT else 0  # an edit's steps: its own
    own = "".join(st.text for st in run.steps[k : k + LABEL_TOKENS])
    if not own:  # (`visible` shows an empty text as "∅": a run with no text yet is named in words)
        return "…" if run.running else "(no text)"
    return visible(own).strip()


class _Tree(QTreeWidget):
    """A tree that says what will appear in it while it is empty."""

    PLACEHOLDER = "Each run appears here. Right-click a token of the output, or click a bar of the chart, to branch."

    def paintEvent(self, e: QPaintEvent) -> None:  # noqa: N802 - Qt override
        super().paintEvent(e)
        if self.topLevelItemCount() == 0:
            painter = QPainter(self.viewport())
            painter.setPen(self.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text))
            flags = int(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft) | int(Qt.TextFlag.TextWordWrap)
            painter.drawText(self.viewport().rect().adjusted(8, 8, -8, -8), flags, self.PLACEHOLDER)


class BranchTree(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tree = _Tree()
        # A viewport made here (as Qt makes its own), known to Python: the placeholder's first paint reads it without
        # PySide6 finding out its type, which builds the enums of ~40 widget classes (~6 ms before the first paint).
        viewport = QWidget(objectName="qt_scrollarea_viewport", autoFillBackground=True)
        viewport.setBackgroundRole(QPalette.ColorRole.Base)
        self.tree.setViewport(viewport)
        self.tree.setHeaderHidden(True)
        self.tree.setColumnCount(1)
        self.tree.setEditTriggers(QAbstractItemView.EditTrigger.DoubleClicked
                                  | QAbstractItemView.EditTrigger.EditKeyPressed)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.setToolTip("Branches: click to show one · ←/→ parent/child, ↑/↓ siblings · F2 renames · "
                             "Delete deletes a branch and what grew from it; Ctrl+Z undoes a delete or an edit")
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.tree)
        self._pg: Playground | None = None
        self._filling = False
        self._soon = QTimer(self, singleShot=True, interval=0)  # one redraw per burst of changes, never inside
        self._soon.timeout.connect(self.refresh)  # the tree's own signal handlers (a rename, a click)

    def bind(self, pg: Playground) -> None:
        self._pg = pg
        for signal in (pg.session_changed, pg.session_replaced, pg.run_started, pg.finished):
            signal.connect(self._refresh_soon)
        self.tree.currentItemChanged.connect(self._current_changed)
        self.tree.itemChanged.connect(self._renamed)
        self.tree.customContextMenuRequested.connect(self._menu)
        delete = QAction("Delete branch", self.tree, shortcut=QKeySequence.StandardKey.Delete,
                         shortcutContext=Qt.ShortcutContext.WidgetShortcut)
        delete.triggered.connect(self.delete_current)
        self.tree.addAction(delete)
        self.refresh()

    # drawing -------------------------------------------------------------------------------------------------
    def _refresh_soon(self, *_args: object) -> None:
        self._soon.start()

    def refresh(self) -> None:
        """Redraw the whole tree (a session holds tens of runs: simpler than patching it) and select the shown."""
        pg = self._pg
        if pg is None:
            return
        self._filling = True
        self.tree.clear()
        items: dict[int, QTreeWidgetItem] = {}
        for run in pg.session.runs.values():  # parents start before their children
            parent = pg.session.get(run.parent[0]) if run.parent is not None else None
            item = QTreeWidgetItem([node_label(run, parent)])
            item.setData(0, RUN_ID, run.id)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            item.setToolTip(0, self._tooltip(run, parent))
            (items[parent.id] if parent is not None and parent.id in items else self.tree.invisibleRootItem()
             ).addChild(item)
            items[run.id] = item
        self.tree.expandAll()
        if pg.shown is not None and pg.shown.id in items:
            self.tree.setCurrentItem(items[pg.shown.id])
        self._filling = False

    def _tooltip(self, run: Run, parent: Run | None) -> str:
        """The node's whole label first (the tree cuts a long one at its width), then what the run is."""
        seed = "" if run.trace is None else f" · seed {run.trace.seed}"
        lines = [node_label(run, parent), f"{len(run.steps)} tokens{seed}"
                 + ("" if run.finished is None else f" · ended: {run.finished.reason}")]
        if parent is not None and run.parent is not None:
            k = run.parent[1]
            kind = _prefix(run, parent).split(" @")[0]
            taken = f", taking “{visible(run.steps[k].text)}”" if kind == "fork" and len(run.steps) > k else ""
            lines.append(f"{kind} of “{node_label(parent, None)}” at step {k}{taken}")
            diff = settings_diff(parent.request.settings, run.request.settings)
            lines.append(f"settings vs its parent: {diff or 'the same'}")
        return "\n".join(lines)

    def item_of(self, run_id: int) -> QTreeWidgetItem | None:
        found = [i for i in self._items() if i.data(0, RUN_ID) == run_id]
        return found[0] if found else None

    def _items(self) -> list[QTreeWidgetItem]:
        out, todo = [], [self.tree.invisibleRootItem()]
        while todo:
            node = todo.pop()
            kids = [node.child(i) for i in range(node.childCount())]
            out.extend(kids)
            todo.extend(kids)
        return out

    # verbs ---------------------------------------------------------------------------------------------------
    def _current_changed(self, item: QTreeWidgetItem | None, _previous: object) -> None:
        if item is not None and not self._filling and self._pg is not None:
            self._pg.show_run(item.data(0, RUN_ID))

    def _renamed(self, item: QTreeWidgetItem, _column: int) -> None:
        if self._filling or self._pg is None:
            return
        run = self._pg.session.get(item.data(0, RUN_ID))
        if run is not None:
            parent = self._pg.session.get(run.parent[0]) if run.parent is not None else None
            typed = item.text(0).removeprefix(_prefix(run, parent)).strip()
            self._pg.branches.rename(run.id, "" if typed == _own_text(run) else typed)

    def delete_current(self) -> None:
        item = self.tree.currentItem()
        if item is not None and self._pg is not None:
            self._pg.branches.delete(item.data(0, RUN_ID))

    def undo(self) -> bool:
        """Edit → Undo (Ctrl+Z) while the tree has focus: put back the latest deleted branch, or take back the latest
        edit's run. False if not done."""
        return self._pg is not None and self.tree.hasFocus() and self._pg.branches.undo()

    def _menu(self, pos: object) -> None:
        item = self.tree.itemAt(pos)
        menu = QMenu(self)
        if item is not None:
            menu.addAction("Rename", lambda: self.tree.editItem(item))
            menu.addAction("Delete branch", self.delete_current)
        undo = menu.addAction(self._pg.branches.undo_label, self._pg.branches.undo,
                              shortcut=QKeySequence.StandardKey.Undo)
        undo.setEnabled(self._pg.branches.can_undo)
        menu.exec(self.tree.viewport().mapToGlobal(pos))
