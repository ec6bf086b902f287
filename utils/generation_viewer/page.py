"""The viewer's page: page.html, page.css and page.js beside this file, with the rows embedded as JSON."""

from __future__ import annotations

import html
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from utils.generation_viewer.rows import reward_series

HERE = Path(__file__).resolve().parent


@cache
def _asset(name: str) -> str:
    return (HERE / name).read_text(encoding="utf-8")


def _embed(value: Any) -> str:
    """JSON safe inside <script>: no '<' (so no </script>), lone surrogates escaped (not encodable as UTF-8)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c")
    return re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text)


def build_page(rows: list[dict], summaries: dict[int, dict] | None = None, title: str = "Generations") -> str:
    """Returns the HTML page of `rows` (from load)."""
    data = {"title": title, "rows": rows, "series": reward_series(rows, summaries or {})}
    return (_asset("page.html").replace("%TITLE%", html.escape(title)).replace("%STYLE%", _asset("page.css"))
            .replace("%SCRIPT%", _asset("page.js")).replace("%DATA%", _embed(data)))
