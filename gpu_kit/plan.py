"""What a prepared kit weighs and the device calls that carry it: the lines `make gpu-kit` ends with."""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path

TRANSFER_MIB = 64  # what one device call may carry: the working tree plus the carried paths
COMMAND = "python3 -m gpu_kit.run --export $OUT"


def travelling_bytes(repo: Path) -> int | None:
    """Bytes of what travels with every call: tracked files and untracked ones git does not ignore (None: no git)."""
    try:
        listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    paths = {repo / name for name in listed.decode().split("\0") if name}
    return sum(path.stat().st_size for path in paths if path.is_file())


def mib(count: int) -> str:
    return f"{count / 2**20:.1f} MiB"


def plan_lines(manifests: list[dict], rows: list[tuple[str, str, str, int]], tree: int | None,
               dist: Path) -> list[str]:
    """Summary lines: per tier its packages, size and parts with the reasons they travel (`rows`: tier, name,
    reason, bytes), what stays behind, and the calls in order, each with the part folder it carries."""
    lines = []
    by_reason: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for tier, _, reason, size in rows:
        kind = "image has another version" if reason.startswith("image has ") else reason
        by_reason[tier][kind].append(size)
    for manifest in manifests:
        tier, parts = manifest["tier"], manifest["parts"]
        lines.append(f"[gpu-kit] tier {tier}: {len(manifest['requirements'])} packages, {mib(manifest['tar_bytes'])}"
                     f" in {len(parts)} parts ({dist}/{parts[0]['folder']} .. {parts[-1]['folder']})")
        reasons = ", ".join(f"{kind} {len(sizes)} ({mib(sum(sizes))})" for kind, sizes in
                            sorted(by_reason[tier].items()))
        lines.append(f"          {reasons}")
        if manifest["sdists"]:
            lines.append(f"          built on the target (sdists): {', '.join(manifest['sdists'])}")
    biggest = max((p["bytes"] for m in manifests for p in m["parts"]), default=0)
    if tree is not None:
        fits = tree + biggest <= TRANSFER_MIB * 2**20
        lines.append(f"[gpu-kit] a call carries the working tree ({mib(tree)}) and one part folder (<= {mib(biggest)}):"
                     f" {'fits in' if fits else 'OVER'} {TRANSFER_MIB} MiB"
                     + ("" if fits else "; lower --part-mib or shrink the tree"))
    lines.append("[gpu-kit] device calls, back to back (the machine goes back after 30 s idle), each running "
                 f"`{COMMAND}`:")
    call = 0
    for manifest in manifests:
        for part in manifest["parts"]:
            call += 1
            lines.append(f"  call {call:2d}: carry [{dist}/{part['folder']}]")
    lines.append("  then calls that carry nothing continue the stages until every one is done")
    return lines
