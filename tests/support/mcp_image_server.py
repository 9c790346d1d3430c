"""A real MCP server on the `mcp` SDK whose tool results are more than text: an image, a resource link, an embedded
resource, and structured content with no text. Run as `python -m tests.support.mcp_image_server` (stdio)."""

from __future__ import annotations

import base64

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, EmbeddedResource, ImageContent, ResourceLink, TextContent, TextResourceContents

from tests.support.images import png

server = MCPServer("pictures")
PICTURE = png(8, 6, seed=7)


@server.tool()
def picture() -> CallToolResult:
    """Draw a picture, with a link to its source and its notes."""
    return CallToolResult(content=[
        TextContent(type="text", text="a picture"),
        ImageContent(type="image", data=base64.b64encode(PICTURE).decode(), mime_type="image/png"),
        ResourceLink(type="resource_link", uri="file:///pictures/source.svg", name="source.svg",
                     description="The picture's source"),
        EmbeddedResource(type="resource", resource=TextResourceContents(uri="mem://notes", text="drawn at dawn")),
    ])


@server.tool()
def measure() -> CallToolResult:
    """Measure the picture."""
    return CallToolResult(content=[], structured_content={"width": 8, "height": 6})


if __name__ == "__main__":
    server.run("stdio")
