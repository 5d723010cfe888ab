"""A time-travel view of a store in the browser: ``git agentos view``.

- :func:`serve` runs a local, read-only web server on 127.0.0.1 (runs page, a run's checkpoints as a
  commit graph with node spans, one checkpoint, the diff of any two, session files; live updates);
- :func:`write_html` writes the same view of some runs as one self-contained HTML file;
- :class:`ViewData` is the data both are built from (JSON-friendly dicts).

The page itself (``assets/``: one HTML file, one script, one stylesheet) ships in the package and
loads nothing from the network."""

from gitstate.view.data import ViewData
from gitstate.view.server import ViewServer, make_server, serve
from gitstate.view.static import HtmlResult, write_html

__all__ = ["HtmlResult", "ViewData", "ViewServer", "make_server", "serve", "write_html"]
