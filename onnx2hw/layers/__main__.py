"""``python -m onnx2hw.layers [--readme]``: print the supported-ops table (``--readme``: rewrite the
table between the ``<!-- ops:begin -->`` / ``<!-- ops:end -->`` markers of README.md in the
current directory)."""
import re
import sys
from pathlib import Path

from . import support_table

if "--readme" in sys.argv[1:]:
    path = Path("README.md")
    text = path.read_text()
    new, n = re.subn(r"(<!-- ops:begin -->\n).*?(<!-- ops:end -->)", lambda m: m.group(1) + support_table() + m.group(2),
                     text, flags=re.S)
    if n != 1:
        sys.exit("error: README.md has no <!-- ops:begin --> ... <!-- ops:end --> block")
    path.write_text(new)
else:
    sys.stdout.write(support_table())
