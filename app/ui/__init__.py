"""The PySide6 window: about 11k lines in floors (main, the window, the Run-menu tools and files, the panels, the run
shown, the charts, the view-model). The view-model (`viewmodel/playground.py`) owns the model thread and the session
and routes the thread's events; widgets follow its signals and call its verbs (a beam search and a quantization diff
hand their jobs to its thread with a queue of their own: `viewmodel/model_job.py`). Widgets import the core for its
records, tables and pure functions (statistics, exports, labels), which they read and draw; none holds a model.
"""
