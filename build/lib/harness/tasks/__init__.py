"""Runs built on the suite: the accuracy task and the power self-test."""
