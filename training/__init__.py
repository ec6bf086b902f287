"""GRPO training on Reasoning Gym with verl, in rooms by the process that runs the code.

- `train_grpo.py`: the entry (hydra): resolve -> check -> preflight or launch -> report.
- `launch/`: the launching process, before Ray starts and while it runs: config, checks, device and Ray sizing,
  resume decision, preflight, the console a person watches.
- `trainer/`: inside Ray's task runner actor: verl's trainer subclass, the data it trains on, per-task metrics,
  generation dumps, faults, progress events.
- `report/`: after a run, for a reader: the run's report and the train -> export -> evaluate -> compare pipeline.
- `import_reference/`: reasoning-gym's training configs translated into ours.
- `cpu_backend/`: verl on a plain CPU, loaded in every verl process through verl's registries.
Imports run launch -> trainer -> envs; nothing in envs/, evaluation/ or utils/ imports training/.
"""
