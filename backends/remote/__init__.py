"""An OpenAI-compatible server as a backend: HTTP transport, the token side, the backend.
"""
