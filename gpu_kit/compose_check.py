"""--dry-run's check of the training stages' command lines: composes each (config name, hydra overrides) with hydra
as train_grpo.py does (configs/ over verl's ppo_trainer), so an unknown key or a bad value fails here, on a CPU.

    python -m gpu_kit.compose_check SPECS.json     # {stage id: [config name, [overrides]]} -> prints {id: "ok"|error}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def main(argv=None) -> int:
    from hydra import compose, initialize_config_dir

    specs = json.loads(Path((argv or sys.argv[1:])[0]).read_text())
    found = {}
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        for stage_id, (name, overrides) in specs.items():
            try:  # hydra.* overrides configure the launch, not the job: compose refuses them
                compose(config_name=name, overrides=[o for o in overrides if not o.startswith("hydra.")])
                found[stage_id] = "ok"
            except Exception as err:  # noqa: BLE001 - each stage's error is reported, the others still checked
                found[stage_id] = f"{type(err).__name__}: {err}"
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
