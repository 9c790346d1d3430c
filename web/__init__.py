"""The HTTP API (ASGI) and the chat page. It reaches workers only through `tasks.client.Client`."""
