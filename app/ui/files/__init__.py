"""What the window keeps: sessions and autosave, exports, preferences, recent sessions, the clipboard,
About.
"""
