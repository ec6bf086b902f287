"""reasoning-gym's `training/configs/*.yaml` imported as configs of ours (`python -m training.import_reference`):
`translate.py` writes the config, its mix and a report; `reference_keys.py` says where each of their keys goes."""
