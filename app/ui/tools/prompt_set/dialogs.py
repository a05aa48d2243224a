"""The prompt set's file dialogs: Load… (a CSV or JSON Lines file's prompts), Save set… (the prompts alone) and
Export… (the results, their format by the filter chosen or the name's suffix). Each asks for a path, then calls the
view's verb, which reads or writes and says what went wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QFileDialog

if TYPE_CHECKING:
    from app.ui.tools.prompt_set.view import PromptSetView

EXPORT_FILTERS = {"CSV (*.csv)": "csv", "JSON Lines (*.jsonl)": "jsonl", "Markdown (*.md)": "md"}


def choose_load(view: PromptSetView) -> None:
    path, _ = QFileDialog.getOpenFileName(view, "Load prompts", "", "Prompt sets (*.csv *.jsonl *.json);;All (*)")
    if path:
        view.load(path)


def choose_save(view: PromptSetView) -> None:
    path, _ = QFileDialog.getSaveFileName(view, "Save the prompts as a file", "prompts.jsonl", "JSON Lines (*.jsonl)")
    if path:
        view.save_set(path)


def choose_export(view: PromptSetView) -> None:
    path, chosen = QFileDialog.getSaveFileName(view, "Export the results", "results.csv", ";;".join(EXPORT_FILTERS))
    if path:
        view.export(path, EXPORT_FILTERS.get(chosen) if "." not in path.rsplit("/", 1)[-1] else None)
