"""QObjects without widgets: the window's view-model (`Playground`), the editing state, the branch
verbs, what is in progress, and the model jobs of the tools.
"""
