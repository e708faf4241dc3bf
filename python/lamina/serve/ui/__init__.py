"""The memory inspector of ``lamina serve``: server-rendered pages under ``/ui`` to see, debug
and correct what an agent remembers (users, layers, the context debugger, delete and forget,
export). See :mod:`~lamina.serve.ui.pages` for the routes and their safety rules,
:mod:`~lamina.serve.ui.session` for the session cookie and CSRF tokens,
:mod:`~lamina.serve.ui.views` for what the pages show and :mod:`~lamina.serve.ui.svg` for the
plots. Needs Jinja2 (in the ``serve`` extra).
"""

from __future__ import annotations

from .pages import CSP, PREFIX, load_eval, ui_router

__all__ = ["ui_router", "load_eval", "CSP", "PREFIX"]
