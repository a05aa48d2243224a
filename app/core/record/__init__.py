"""What a run leaves behind: the step's `Sample`, the `StepTrace` and `RunTrace`, trace files,
speculative records and exports. Plain data: nothing here runs a stage or a model.
"""
