"""The Qt-free core: settings, sampler pipeline, generation loop, model thread, traces, metrics."""
