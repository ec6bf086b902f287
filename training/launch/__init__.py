"""The launching process: what runs before Ray starts (config, checks, device and Ray sizing, resume, preflight)
and what it shows while the run lives (the console). Nothing here runs inside a Ray actor."""
