"""The charts drawn with pyqtgraph from recorded steps: the step chart, the timeline, overlays,
their scales and colours, and the dock that hosts them.
"""
