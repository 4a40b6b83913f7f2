pytest_plugins = ["harness.plugin", "pytester"]
