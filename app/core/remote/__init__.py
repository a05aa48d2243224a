"""A model that samples by itself: an OpenAI-compatible server. The one mapping from settings to a
server's request per dialect, the run on a server as events, the API keys in the OS keychain, and the probe of
what a server really applies of what it is sent (`probe`, over `probe_session`, `probe_checks`, `probe_stats`).
"""
