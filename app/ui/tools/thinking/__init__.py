"""Run ▸ Think probes…: the answer a thinking model would give if it stopped thinking here, drawn over its thinking
time (`probe_view`: the dock and its job; `probe_chart`: the curves)."""
