"""Evaluation of trained models on Reasoning Gym suites: `evaluation/evaluate_model.py` is the entry point."""
