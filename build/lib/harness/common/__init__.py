"""What every layer uses: name registries, atomic JSON files and directories, file locks, and the
session's Ctrl-C/SIGTERM handling."""
