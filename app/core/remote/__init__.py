"""A model that samples by itself: an OpenAI-compatible server. The one mapping from settings to a
server's request per dialect, the run on a server as events, and the API keys in the OS keychain.
"""
