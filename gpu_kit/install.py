"""On the target: checks the kit's parts, reassembles them and installs the wheels into a venv laid over the image.

    python3 -m gpu_kit.install status                  # which parts are here, their sums
    python3 -m gpu_kit.install install --tiers core    # exit 0 installed, 2 parts missing, 3 none here, 4 damaged

The venv (default .venv-kit) is made from the image's Python without pip and without its own system packages; a .pth
file adds the image's site-packages after the venv's own, so the kit's packages shadow the image's and everything
else (torch and its CUDA libraries above all) comes from the image. pip is bootstrapped from the kit's own wheel and
installs the tier's exact pins with `--no-index --find-links --no-deps` (the lock is the whole set; nothing is
resolved). Afterwards: the venv's torch must be the image's (same version, same file), `pip check` must find nothing
wrong with a kit package (requirements on a tier not installed are listed, not fatal), and the project is installed
editable. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from gpu_kit import chunks

REPO = Path(__file__).resolve().parents[1]
NEVER = {"torch", "torchvision", "torchaudio", "triton", "cuda-toolkit"}  # the image's; the kit never installs them
WAITING, ABSENT, DAMAGED = 2, 3, 4  # exit codes: parts missing, no part of the tier here, a part damaged
# which torch an interpreter would import, without importing it (seconds saved twice)
TORCH_PROBE = ("import importlib.metadata as m, importlib.util as u, json; "
               "print(json.dumps({'version': m.version('torch'), 'file': u.find_spec('torch').origin}))")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m gpu_kit.install", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("status", "install"))
    parser.add_argument("--tiers", default="core", help="comma-separated, in order (core first)")
    parser.add_argument("--dist", type=Path, default=REPO / "gpu_kit" / "dist")
    parser.add_argument("--venv", type=Path, default=REPO / ".venv-kit")
    parser.add_argument("--work", type=Path, default=REPO / "gpu_kit" / "work" / "target",
                        help="where the tiers' files are unpacked")
    parser.add_argument("--image-python", default=sys.executable, help="the image's interpreter (default: this one)")
    parser.add_argument("--no-project", action="store_true", help="do not install this repository into the venv")
    parser.add_argument("--report", type=Path, help="also write what happened as JSON here")
    return parser.parse_args(argv)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def run(command: list, check: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """Runs a command, capturing its output; with `check`, a failure raises with the command and its output's end."""
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, command))} exited {done.returncode}:\n"
                           f"{done.stdout[-1500:]}{done.stderr[-3000:]}")
    return done


def probe(python, code: str) -> dict:
    done = run([python, "-c", code], timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{python} -c {code!r} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def make_venv(venv: Path, image_python: str) -> None:
    """A venv of the image's Python whose site-packages come first, then the image's (a .pth runs addsitedir, so
    the image's own .pth files apply too)."""
    run([image_python, "-m", "venv", "--without-pip", venv], check=True, timeout=300)
    image_sites = probe(image_python, "import json, site; print(json.dumps(site.getsitepackages()))")
    own = probe(venv_python(venv), "import json, sysconfig; print(json.dumps(sysconfig.get_paths()['purelib']))")
    lines = [f"import site; site.addsitedir({path!r})" for path in image_sites if Path(path).is_dir()]
    (Path(own) / "_gpu_kit_image.pth").write_text("\n".join(lines) + "\n")


def bootstrap_pip(venv: Path, wheels: Path) -> None:
    """Installs pip into the venv from the kit's pip wheel (run from the wheel itself: no ensurepip, no index)."""
    wheel = next(wheels.glob("pip-*.whl"), None)
    if wheel is None:
        raise RuntimeError(f"no pip wheel in {wheels}: the core tier carries one (prepare --pip)")
    run([venv_python(venv), f"{wheel}/pip", "install", "--quiet", "--no-index", "--no-deps", wheel], check=True,
        timeout=300)


def pip_check(venv: Path, names: set[str], elsewhere: set[str]) -> tuple[list[str], list[str]]:
    """`pip check` lines about kit packages (the image's own packages may disagree with the kit: not ours), split
    into (problems, expected): expected ones name a package of a tier not installed yet."""
    done = run([venv_python(venv), "-m", "pip", "check"], timeout=300)
    problems, expected = [], []
    for line in done.stdout.strip().splitlines():
        if canonical(line.split(" ", 1)[0]) not in names:
            continue
        needed = re.search(r" (?:requires|has requirement) ([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        (expected if needed and canonical(needed[1]) in elsewhere else problems).append(line)
    return problems, expected


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def install_tier(args, tier: str, state: chunks.TierState, report: dict) -> None:
    """Unpacks a complete tier, installs its pins into the venv (made when missing) and stamps it."""
    manifest, started = state.manifest, time.time()
    names = {canonical(r.split("==")[0]) for r in manifest["requirements"]}
    if names & NEVER:
        raise RuntimeError(f"{tier} carries {', '.join(sorted(names & NEVER))}: the kit never replaces the "
                           "image's torch stack; prepare it again")
    wheels = args.work / tier
    shutil.rmtree(wheels, ignore_errors=True)
    chunks.extract(args.dist, state, wheels)
    requirements = wheels / "requirements.txt"
    requirements.write_text("\n".join(r for r in manifest["requirements"] if not r.startswith("pip==")) + "\n")
    image_torch = probe(args.image_python, TORCH_PROBE)
    if not venv_python(args.venv).exists():
        make_venv(args.venv, args.image_python)
    if not (args.venv / "bin" / "pip").exists():
        bootstrap_pip(args.venv, wheels if tier == "core" else args.work / "core")
    links = [arg for folder in sorted(args.work.iterdir()) if folder.is_dir() for arg in ("--find-links", folder)]
    run([venv_python(args.venv), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
         "--no-build-isolation", *links, "-r", requirements], check=True, timeout=1800)
    if tier == "core" and not args.no_project:
        run([venv_python(args.venv), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
             "--no-build-isolation", "-e", REPO], check=True, timeout=600)
    venv_torch = probe(venv_python(args.venv), TORCH_PROBE)
    if venv_torch != image_torch:
        raise RuntimeError(f"the venv's torch {venv_torch} is not the image's {image_torch}")
    done_tiers = {tier} | {t for t in manifest["tiers"] if (args.venv / f"gpu-kit-{t}.json").is_file()}
    kit = {name for t in done_tiers for name in manifest["tiers"][t]}
    elsewhere = {name for t, listed in manifest["tiers"].items() if t not in done_tiers for name in listed}
    problems, expected = pip_check(args.venv, kit - set(manifest.get("unchecked", ())), elsewhere)
    report[tier] = {"seconds": round(time.time() - started, 1), "packages": len(names), "torch": venv_torch,
                    "pip_check": problems, "pip_check_other_tiers": expected}
    (args.venv / f"gpu-kit-{tier}.json").write_text(json.dumps({**report[tier],
                                                               "tar_sha256": manifest["tar_sha256"]}) + "\n")


def installed(venv: Path, state: chunks.TierState) -> bool:
    stamp = venv / f"gpu-kit-{state.tier}.json"
    return stamp.is_file() and json.loads(stamp.read_text())["tar_sha256"] == state.manifest["tar_sha256"]


def main(argv=None) -> int:
    args = parse_args(argv)
    report: dict = {}
    code = 0
    for tier in [t for t in args.tiers.split(",") if t]:
        state = chunks.scan(args.dist, tier)
        print(f"[gpu-kit] {state.describe()}")
        if args.action == "status":
            continue
        if state.manifest is None:
            code = ABSENT
            break
        if state.bad:
            print(f"[gpu-kit] {tier}: damaged parts ({'; '.join(state.bad)}): carry them again")
            code = DAMAGED
            break
        if not state.complete:
            more = f" and {len(state.missing) - 1} more" if len(state.missing) > 1 else ""
            print(f"[gpu-kit] {tier}: waiting for {state.missing[0]}{more} ({len(state.ok)} of "
                  f"{len(state.manifest['parts'])} parts here)")
            code = WAITING
            break
        if installed(args.venv, state):
            print(f"[gpu-kit] {tier}: installed already in {args.venv}")
            continue
        install_tier(args, tier, state, report)
        done = report[tier]
        print(f"[gpu-kit] {tier}: {done['packages']} packages installed in {done['seconds']} s into {args.venv}; "
              f"torch {done['torch']['version']} is the image's")
        for line in done["pip_check"]:
            print(f"[gpu-kit] pip check: {line}")
        if done["pip_check_other_tiers"]:
            print(f"[gpu-kit] pip check: {len(done['pip_check_other_tiers'])} requirements on tiers not installed "
                  f"(e.g. {done['pip_check_other_tiers'][0]})")
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=1) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
