"""What a run leaves behind: the step's `Sample`, the `StepTrace` and `RunTrace`, trace files,
speculative records, exports, and a thinking model's spans and their figures. Plain data: nothing here runs a stage
or a model.
"""
