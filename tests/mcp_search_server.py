"""A web-search MCP server over a local site, for the websearch example's tests.

``python tests/mcp_search_server.py URL`` (stdio) reads the site at URL over HTTP
(its index page and every page it links to) and offers two tools, as a real
search server does: ``search`` (ranked results with title, url and snippet, as
structured content) and ``fetch`` (a page's text).  Written with the official
SDK's server side; nothing of AMACS is imported.
"""

from __future__ import annotations

import html
import re
import sys
import urllib.parse
import urllib.request

from mcp.server.mcpserver import MCPServer


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a local test site
        return str(response.read().decode("utf-8"))


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def crawl(root: str) -> dict[str, tuple[str, str]]:
    """URL -> (title, text) of the index page and the pages it links to."""
    index = _get(root)
    pages = {}
    for href in re.findall(r'href="([^"]+)"', index):
        url = urllib.parse.urljoin(root, href)
        page = _get(url)
        title = re.search(r"<title>(.*?)</title>", page, re.S)
        pages[url] = (title.group(1).strip() if title else url, _text(re.sub(r"<title>.*?</title>", "", page)))
    return pages


def main() -> None:
    pages = crawl(sys.argv[1])
    server = MCPServer("local-search")

    @server.tool()
    def search(query: str, max_results: int = 5) -> dict[str, list[dict[str, str]]]:
        """Search the web for QUERY; the best results first, with title, url and snippet."""
        words = [w for w in re.findall(r"\w+", query.lower()) if len(w) > 2]
        scored = []
        for url, (title, text) in pages.items():
            score = sum((title + " " + text).lower().count(w) for w in words)
            if score:
                scored.append((score, url, title, text))
        scored.sort(key=lambda s: -s[0])
        return {"results": [{"title": t, "url": u, "snippet": x[:80]} for _s, u, t, x in scored[:max_results]]}

    @server.tool()
    def fetch(url: str) -> str:
        """The text of the page at URL."""
        if url not in pages:
            raise ValueError(f"no page {url}")
        return pages[url][1]

    server.run("stdio")


if __name__ == "__main__":
    main()
