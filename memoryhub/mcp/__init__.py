"""MemoryHub as an MCP server (Model Context Protocol) at `/mcp/`: the memory tools a model calls,
over streamable HTTP, authenticated by the tenant's API keys. A plain package, not a Django app:
no models."""
