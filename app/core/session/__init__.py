"""What the person made: the session's runs and their tree, branches and edits, groups of runs,
what each view recorded, and the session file.
"""
