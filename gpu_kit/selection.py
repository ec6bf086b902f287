"""What the kit carries: requirements-gpu.lock's pins that the target image lacks or has at another version, in tiers
(`core`: everything the GPU path needs; `kernels`: vLLM's optional kernel packages and what only they need;
`benchmarks`: lm-eval and what only it needs, prepared on request: `--tiers core,kernels,benchmarks`).

The lock's `# via` comments are its reverse-dependency graph: a package belongs to the kernel tier when it is one of
KERNEL_ROOTS or everything that pulls it in does. Stdlib only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# vLLM 0.24.0's kernel packages: it declares them, but imports them only for the backends that use them
KERNEL_ROOTS = ("flashinfer-python", "flashinfer-cubin", "nvidia-cutlass-dsl", "quack-kernels", "tilelang",
                "tokenspeed-mla", "humming-kernels")
# lm-evaluation-harness: external benchmarks in eval suites, which no stage of the GPU path runs
BENCHMARK_ROOTS = ("lm-eval",)
TIERS = ("core", "kernels", "benchmarks")


def canonical(name: str) -> str:
    """PEP 503 name: lower case, runs of -_. as one dash."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    name: str  # canonical
    version: str
    via: tuple[str, ...] = ()  # canonical names (or "-r FILE") that pull it in


@dataclass
class Image:
    """The target image's packages: canonical name -> version (None: there, version unknown); `stack`: never
    carried or replaced (its torch and the CUDA libraries torch pins)."""
    versions: dict[str, str | None] = field(default_factory=dict)
    stack: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Choice:
    pin: Pin
    tier: str | None  # None: not carried
    reason: str  # why it is carried or not


def read_lock(path: Path) -> dict[str, Pin]:
    """Parses a uv-compiled lock (`name==version` lines, each followed by its `# via` lines)."""
    pins: dict[str, Pin] = {}
    current: tuple[str, str] | None = None
    via: list[str] = []

    def flush():
        if current:
            pins[current[0]] = Pin(current[0], current[1], tuple(via))

    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;#]+)", line)
        if match:
            flush()
            current, via = (canonical(match[1]), match[3]), []
            continue
        comment = line.strip().lstrip("#").strip()
        if current and comment and comment != "via":
            source = comment.removeprefix("via ").strip()
            via.append(source if source.startswith("-") else canonical(source))
    flush()
    return pins


def read_pins(path: Path) -> dict[str, str]:
    """`name==version` lines of a requirements file (comments and blank lines ignored) -> {canonical: version}."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            if not sep:
                raise ValueError(f"{path}: {line!r} is not name==version")
            found[canonical(name)] = version.strip()
    return found


def read_image(path: Path, freeze: Path | None = None) -> Image:
    """Reads gpu_kit/image.txt (`name[==version]  [# stack]` lines); a `pip freeze` of the image (`freeze`) gives
    the versions, names included, when there is one."""
    image = Image()
    for line in path.read_text().splitlines():
        body, _, comment = line.partition("#")
        body = body.strip()
        if not body:
            continue
        name, _, version = body.partition("==")
        image.versions[canonical(name)] = version.strip() or None
        if comment.strip() == "stack":
            image.stack.add(canonical(name))
    if freeze is not None:
        frozen = {}
        for line in freeze.read_text().splitlines():
            match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line.strip())
            if match:
                frozen[canonical(match[1])] = match[2]
        image.versions = {**{name: None for name in image.stack}, **frozen}
    return image


def kernel_tier(pins: dict[str, Pin], roots: tuple[str, ...] = KERNEL_ROOTS) -> set[str]:
    """`roots` and every pin pulled in only by packages of the tier (a fixpoint over the lock's via graph)."""
    tier = {name for name in roots if name in pins}
    grew = True
    while grew:
        grew = False
        for name, pin in pins.items():
            if name not in tier and pin.via and all(parent in tier for parent in pin.via):
                tier.add(name)
                grew = True
    return tier


def select(pins: dict[str, Pin], image: Image, overrides: dict[str, str] | None = None,
           only: set[str] | None = None, always: frozenset[str] = frozenset()) -> list[Choice]:
    """One Choice per pin (overrides replace or add versions; `only` keeps those names): the image's stack is never
    carried (a stack package whose known version differs from the lock is an error: the kit cannot fix it), a
    package the image has at the pinned version is not carried unless it is in `always`, everything else is carried,
    in its tier."""
    overrides = overrides or {}
    unknown = set(overrides) - set(pins)
    pins = {**pins, **{name: Pin(name, version, ("overrides",)) for name, version in overrides.items()
                       if name in unknown}}
    kernels, benchmarks = kernel_tier(pins), kernel_tier(pins, BENCHMARK_ROOTS)
    choices = []
    for name, pin in sorted(pins.items()):
        if only is not None and name not in only:
            continue
        if name in overrides:
            pin = Pin(name, overrides[name], pin.via)
        have = image.versions[name] if name in image.versions else "absent"
        if name in image.stack:  # a local label (2.11.0+cu130) names a build of the same version
            if have not in (None, "absent") and have.split("+")[0] != pin.version:
                raise ValueError(f"the image's {name} is {have}, requirements-gpu.lock pins {pin.version}: the kit "
                                 f"never replaces the image's stack (gpu_kit/image.txt); use an image with {name} "
                                 f"{pin.version} or lock the image's version")
            choices.append(Choice(pin, None, "image stack"))
        elif have == pin.version and name not in always:
            choices.append(Choice(pin, None, "image has it"))
        else:
            reason = {"absent": "not in the image", None: "image version unknown"}.get(have, f"image has {have}")
            tier = "kernels" if name in kernels else "benchmarks" if name in benchmarks else "core"
            choices.append(Choice(pin, tier, reason))
    return choices


def carried(choices: list[Choice], tier: str) -> list[Pin]:
    """The pins a tier carries, by name."""
    return [c.pin for c in choices if c.tier == tier]
