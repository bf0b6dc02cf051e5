"""``python -m zrl.translate --table ebv|rainbow``: the README's translation table of one reference."""

import sys

from zrl.translate import table

if len(sys.argv) == 3 and sys.argv[1] == "--table":
    print(table(sys.argv[2]))
else:
    print("python -m zrl.translate --table ebv|rainbow", file=sys.stderr)
    sys.exit(2)
