"""The file stock pip would take from PyPI for each `name==version` pin of a lock, for a target Python and Linux
platform, found from PyPI's JSON simple API (PEP 691) without downloading a wheel.

`pip --isolated install --dry-run --no-deps` answers the same question but downloads every wheel it picks (GBs for the
GPU lock: 17 minutes of CI on a fresh machine); with --no-deps its choice is the file list, the target's tags (pip's
own list: packaging.tags) and the file's Requires-Python, which is what this reads. A wheel's requirements come from
its metadata file, which PyPI serves beside it (PEP 658: kilobytes). `tests/project/test_install.py` checks that real
pip agrees on the small pins. The pins come from gpu_kit.selection.read_lock, the project's lock reader.
"""

import concurrent.futures
import functools
import http.client
import json
import time
import urllib.error
import urllib.request
from email.parser import Parser

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

INDEX = "https://pypi.org/simple"
JSON = "application/vnd.pypi.simple.v1+json"
TRIES = 4  # a check of hundreds of requests must not fail on one dropped connection or 5xx (it did here, 1 run in ~7)


def fetch(request: urllib.request.Request | str, timeout: float) -> bytes:
    """The body of one GET, retried with a growing pause on a network error, a time-out or a 5xx answer; a 4xx answer
    (a name or file PyPI does not have) is raised at once."""
    for attempt in range(TRIES):
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return answer.read()
        except urllib.error.HTTPError as err:
            if err.code < 500 or attempt == TRIES - 1:
                raise
        except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError):
            if attempt == TRIES - 1:
                raise
        time.sleep(2 ** attempt)
    raise AssertionError("unreachable")


def linux_tags(python: str, glibc_max: int = 31) -> list[Tag]:
    """pip's supported tags for `--python-version python --platform linux_x86_64 --platform manylinux...` up to
    glibc 2.`glibc_max`, most preferred first (the legacy manylinux1/2010/2014 names are aliases of 2.5/2.12/2.17)."""
    version = tuple(int(part) for part in python.split("."))
    aliases = {5: "manylinux1_x86_64", 12: "manylinux2010_x86_64", 17: "manylinux2014_x86_64"}
    platforms = []
    for minor in range(glibc_max, 4, -1):
        platforms.append(f"manylinux_2_{minor}_x86_64")
        platforms += [aliases[minor]] if minor in aliases else []
    platforms.append("linux_x86_64")
    interpreter = f"cp{version[0]}{version[1]}"
    return [*cpython_tags(version, platforms=platforms),
            *compatible_tags(version, interpreter=interpreter, platforms=platforms)]


@functools.cache
def project_files(name: str) -> tuple[dict, ...]:
    """Every file PyPI lists for the project; asked once per test session (torch's list is megabytes)."""
    request = urllib.request.Request(f"{INDEX}/{canonicalize_name(name)}/", headers={"Accept": JSON})
    return tuple(json.loads(fetch(request, timeout=120))["files"])


@functools.cache
def _suits(requires_python: str | None, python: str) -> bool:
    try:
        return not requires_python or SpecifierSet(requires_python).contains(python, prereleases=True)
    except InvalidSpecifier:
        return True  # pip ignores a Requires-Python it cannot parse


@functools.cache
def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _file_version(filename: str) -> Version | None:
    """The version a wheel's or sdist's file name gives, without parsing the rest (torch lists ~10k files)."""
    if filename.endswith(".whl"):
        return _version(filename.split("-")[1])
    for suffix in (".tar.gz", ".zip"):
        if filename.endswith(suffix):
            return _version(filename[:-len(suffix)].rsplit("-", 1)[-1])
    return None


def choose(name: str, version: str, files: list[dict], python: str, tags: list[Tag]) -> dict | None:
    """The file pip would take for name==version: the wheel with the most preferred tag, else the sdist; None if
    no file of that version suits the target."""
    rank = {tag: i for i, tag in enumerate(tags)}
    wanted, best = Version(version), None
    for file in files:
        filename = file["filename"]
        if _file_version(filename) != wanted or not _suits(file.get("requires-python"), python):
            continue
        if filename.endswith(".whl"):
            score = min((rank[t] for t in parse_wheel_filename(filename)[3] if t in rank), default=None)
        else:
            score = len(rank)  # an sdist: pip builds it, after any wheel
        if score is not None and (best is None or score < best[0]):
            best = (score, file)
    return None if best is None else {"name": name, "version": version, **best[1]}


def resolve(lock_pins: list[tuple[str, str]], python: str) -> tuple[list[dict], list[str]]:
    """(the file chosen for each pin, the pins for which PyPI has none), asked 16 packages at a time."""
    tags = linux_tags(python)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        listings = list(pool.map(lambda pin: project_files(pin[0]), lock_pins))
    chosen = [choose(name, version, files, python, tags) for (name, version), files in zip(lock_pins, listings)]
    missing = [f"{name}=={version}" for (name, version), file in zip(lock_pins, chosen) if file is None]
    return [file for file in chosen if file], missing


def requires_dist(file: dict) -> list[str]:
    """A wheel's Requires-Dist lines from its PEP 658 metadata file."""
    return Parser().parsestr(fetch(file["url"] + ".metadata", timeout=60).decode()).get_all("Requires-Dist") or []
