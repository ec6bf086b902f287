"""What a person reads after (or while) a run, from the files it wrote: the report, and the one-command pipeline
that trains, exports, evaluates and compares.

    python -m training.report RUN_DIR        # the run's table, report.md and report.png
"""
