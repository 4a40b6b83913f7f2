# The dlscale plugin itself is loaded through its pytest11 entry point (pyproject.toml).
pytest_plugins = ["pytester"]
