"""How records become figures and verdicts, as pure functions: statistics, per-cell metrics, the
step-time breakdown, the machine yardstick, fingerprints, the verdict policy and the recording policy."""
