"""The MCP server side toward clients: handlers, the stdio end, the HTTP app and its event store."""
