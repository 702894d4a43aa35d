"""Which warm template a program forks from, and what a template's container is allowed."""

from pathlib import Path

from sandbox.engine.backends.bundle import TEMPLATE_CAPABILITIES, bundle_config, template_config
from sandbox.engine.backends.warm import ImageTemplates, Template
from sandbox.engine.models import Limits
from sandbox.runtimes import RuntimeRegistry

RUNTIMES = Path(__file__).resolve().parents[2] / "runtimes"


def _templates() -> ImageTemplates:
    spec = RuntimeRegistry.load(RUNTIMES).get("python")
    templates = [Template(None, spec.image, spec.template, spec.run, name, m)
                 for name, m in spec.template_sets.items()]
    for template in templates:
        template.ready = True
    return ImageTemplates(templates, spec.run)


def test_a_program_forks_from_the_smallest_set_holding_what_it_names():
    templates = _templates()
    chosen = lambda code: templates.choose(code.encode()).name  # noqa: E731
    assert chosen("print('hello')") == "standard"
    assert chosen("import math, re\nfrom collections import deque") == "standard"
    assert chosen("import numpy as np") == "numpy"
    assert chosen("from sympy import symbols") == "sympy"
    assert chosen("import pandas as pd") == "pandas"
    assert chosen("import numpy\nimport sympy") == "scientific"
    assert chosen("import scipy.optimize") == "scientific"
    # A word match: a comment naming numpy gets the larger template, never a wrong answer.
    assert chosen("# no numpy here\nprint(1)") == "numpy"


def test_a_set_that_is_not_ready_sends_its_programs_to_a_larger_one_or_cold():
    templates = _templates()
    templates.templates[1].ready = False  # numpy
    assert templates.choose(b"import numpy").name == "pandas"  # it has numpy too
    assert templates.choose(b"print(1)").name == "standard"
    for template in templates.templates[1:]:
        template.ready = False
    assert templates.choose(b"import numpy") is None


def test_a_program_with_its_own_module_named_like_a_preloaded_one_starts_cold_or_larger():
    templates = _templates()
    for template in templates.templates:
        template.shadowed = frozenset(template.modules) | {"json"}
    assert templates.choose(b"import json", {"json", "main"}) is None  # json.py beside main.py
    assert templates.choose(b"import helper", {"helper", "main"}).name == "standard"
    # numpy.py shadows nothing the standard set imported: a program not naming numpy forks.
    assert templates.choose(b"import x", {"numpy"}).name == "standard"
    assert templates.choose(b"import numpy", {"numpy"}) is None


def test_a_program_that_changes_its_environment_starts_cold():
    """A preloaded module read its environment variables when the template imported it:
    PANDAS_COPY_ON_WRITE set before `import pandas` took no effect in a fork."""
    templates = _templates()
    for code in ["import os\nos.environ['PANDAS_COPY_ON_WRITE'] = '1'\nimport pandas",
                 "import os\nos.environ [\"OMP_NUM_THREADS\"]='1'\nimport numpy",
                 "from os import environ\nenviron.update(TZ='UTC-05')",
                 "import os\nos.environ.setdefault('SYMPY_GROUND_TYPES', 'python')",
                 "import os\nos.environ |= {'A': '1'}", "import os\ndel os.environ['MPLBACKEND']",
                 "import os\nos.environ.pop('TZ', None)", "import os\nos.putenv('TZ', 'UTC')",
                 "import os\nos.unsetenv('TZ')"]:
        assert templates.choose(code.encode()) is None, code
    # Reading it changes nothing: such a program forks.
    for code in ["import os\nprint(os.environ.get('HOME'), os.environ['PATH'])",
                 "import os\nif os.environ['HOME'] == '/tmp':\n    print(1)",
                 "import os, subprocess\nsubprocess.run(['env'], env={**os.environ, 'A': '1'})"]:
        assert templates.choose(code.encode()).name == "standard", code


def test_a_template_container_is_root_with_only_what_making_sandboxes_takes():
    limits = Limits(compile_timeout_s=1, run_timeout_s=1, memory_mb=512, cpus=1, pids=64,
                    workdir_mb=8, output_bytes=1024, fetch_bytes=1024)
    config = template_config(bundle_config(
        ["x"], rootfs=Path("/r"), env=[], limits=limits, workdir=Path("/w"), cgroups_path="/c",
        swap_accounting=True, precompiled_seccomp=True))
    process = config["process"]
    assert process["user"] == {"uid": 0, "gid": 0}
    assert set(process["capabilities"]) == {"bounding", "effective", "permitted"}
    assert all(caps == TEMPLATE_CAPABILITIES for caps in process["capabilities"].values())
    assert set(TEMPLATE_CAPABILITIES) == {"CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID",
                                          "CAP_SETPCAP", "CAP_KILL", "CAP_NET_ADMIN"}
    assert process["noNewPrivileges"] is True
    assert config["root"]["readonly"] is True
    assert {"type": "network"} in config["linux"]["namespaces"]
    assert "seccomp" not in config["linux"] and config["annotations"] == {}
