"""python -m zrl.config > config/defaults.toml"""

from zrl.config.defaults import defaults_toml

print(defaults_toml(), end="")
