"""Providers: the protocol, the Anthropic streaming implementation, the scripted one, and replay."""
