"""`pip check` for the target, done here before anything ships: does every requirement of every wheel the kit carries
hold on the target's Python, with the kit laid over the image? The lock is resolved for Python 3.11; markers differ on
3.12 (vllm 0.24.0 wants setuptools < 81 there: the lock's 81.0.0 broke it, found by this check). Runs on the preparing machine.
"""

from __future__ import annotations

import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def target_environment(python_version: str) -> dict[str, str]:
    """PEP 508 marker values of CPython `python_version` on Linux x86_64."""
    env = default_environment()
    env.update(python_version=python_version, python_full_version=f"{python_version}.0", sys_platform="linux",
               platform_system="Linux", platform_machine="x86_64", os_name="posix", implementation_name="cpython",
               platform_python_implementation="CPython")
    return env


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """Requires-Dist of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(name).decode("utf-8"))
    return [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]


def applies(requirement: Requirement, env: dict[str, str], extras: frozenset[str]) -> bool:
    """Whether a requirement holds in `env` for the package installed with `extras`."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**env, "extra": extra}) for extra in {"", *extras})


def problems(wheels: dict[str, Path], versions: dict[str, str | None], python_version: str,
             top: list[Requirement] = (), unchecked: set[str] = frozenset()) -> list[tuple[str, str]]:
    """Returns (required name, message) for each requirement of a carried wheel (with the extras something asks
    for, starting from `top`) that the target would not meet: the name absent from `versions` (the kit's pins and
    the image's packages), or its version outside the specifier. Image packages of unknown version (None) and
    packages without a wheel here (the image's, sdists) are not checked, nor the requirements of `unchecked`."""
    env = target_environment(python_version)
    queue = [(name, frozenset()) for name in wheels]
    queue += [(canonicalize_name(r.name), frozenset(r.extras)) for r in top]
    seen, found = set(), []
    while queue:
        name, extras = queue.pop()
        if (name, extras) in seen or name not in wheels or name in unchecked:
            continue
        seen.add((name, extras))
        for requirement in wheel_requirements(wheels[name]):
            if not applies(requirement, env, extras):
                continue
            needed = canonicalize_name(requirement.name)
            if requirement.extras:
                queue.append((needed, frozenset(requirement.extras)))
            if needed not in versions:
                found.append((needed, f"{name} requires {requirement}, which neither the kit nor the image has"))
            elif versions[needed] is not None and not requirement.specifier.contains(versions[needed],
                                                                                    prereleases=True):
                found.append((needed, f"{name} requires {requirement}; the target would have "
                                      f"{needed} {versions[needed]}"))
    return sorted(set(found))
