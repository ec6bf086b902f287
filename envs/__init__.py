"""The procedural environment: task mixes, the task stream, the reward and the curriculum (CPU only, no Ray, no GPU).

Custom Reasoning Gym tasks: list modules (dotted names or .py paths, comma-separated) in RG_GRPO_TASK_MODULES; they are
imported with this package, so the tasks they register exist in every process that streams or scores, including the
producer and scorer child processes and verl's Ray workers (which inherit the environment).
"""

import importlib
import importlib.util
import os


def _import_task_modules() -> None:
    for name in filter(None, (part.strip() for part in os.environ.get("RG_GRPO_TASK_MODULES", "").split(","))):
        if name.endswith(".py"):
            spec = importlib.util.spec_from_file_location(os.path.basename(name)[:-3], name)
            if spec is None or not os.path.isfile(name):
                raise ImportError(f"RG_GRPO_TASK_MODULES: no such file {name}")
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        else:
            importlib.import_module(name)


_import_task_modules()
