"""The package surface: import needs only torch; every public function documents its shapes."""

import inspect
import subprocess
import sys
from pathlib import Path

import engine.algos

REPO = Path(__file__).resolve().parents[3]

# Everything `import engine.algos` loads beyond `import torch` must be stdlib or engine itself.
_PROBE = """
import sys
import torch
before = set(sys.modules)
import engine.algos
new = {m.split('.')[0] for m in set(sys.modules) - before}
print(sorted(new - set(sys.stdlib_module_names) - {'engine'}))
"""


def test_import_needs_only_torch():
    out = subprocess.run([sys.executable, "-c", _PROBE], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_all_exports_exist_and_are_documented():
    for name in engine.algos.__all__:
        obj = getattr(engine.algos, name)
        if callable(obj):
            assert inspect.getdoc(obj), name
    functions = [getattr(engine.algos, n) for n in engine.algos.__all__]
    for fn in (f for f in functions if inspect.isfunction(f)):
        doc = inspect.getdoc(fn)
        assert "Returns" in doc and ("batch" in doc or "vocab" in doc), fn.__name__
