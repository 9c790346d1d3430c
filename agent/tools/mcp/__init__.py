"""MCP servers' tools as Baton tools: the file (`config`), the annotations' meaning (`mapping`), the connections
(`connections`, an asyncio loop per process that the sync tool threads submit calls to)."""
