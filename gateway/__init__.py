"""prefixgate's MCP side: config, downstream connections, the upstream server, the CLI."""

__version__ = "0.1.0"
