"""The PySide6 window: a thin view over the core's requests and events."""
