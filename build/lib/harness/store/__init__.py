"""What outlives a session: baseline files, the nightly history, the session's results directory."""
