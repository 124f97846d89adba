"""docs/configuration.md is generated from the series and names every key and environment variable it adds.

The committed page must be what the generator makes of the committed series (``--check``); every key the series
adds to UniLab's FlashSAC config and every ``FLASHSAC_*`` / ``UNISIM_*`` variable its code reads has a row. The
negative control drops a key from a copy of the applied config: the generator then leaves that row out, so a
page kept by hand would be caught.
"""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import PROJECT

sys.path.insert(0, str(PROJECT / "experiments" / "tables"))

import configuration_doc  # noqa: E402
from patchset import api  # noqa: E402


def test_the_committed_page_is_generated() -> None:
    proc = subprocess.run([sys.executable, str(PROJECT / "experiments" / "tables" / "configuration_doc.py"),
                           "--check"], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr


def test_every_added_key_and_variable_has_a_row() -> None:
    page = (PROJECT / "docs" / "configuration.md").read_text()
    images, patches = api.series_files("unilab", (configuration_doc.CONFIG,))
    pre, post = images[configuration_doc.CONFIG]
    before = configuration_doc.keys_with_comments(pre.decode())
    added = [k for k in configuration_doc.keys_with_comments(post.decode()) if k not in before]
    assert len(added) >= 10
    assert all(f"| `{key}` |" in page for key in added), [k for k in added if f"| `{key}` |" not in page]
    sources = [*patches, *configuration_doc.runtime_sources(patches)]  # the series' code and the own package's
    variables = {v for _, _, lines in sources for line in lines for v in configuration_doc.ENV_NAME.findall(line)}
    assert any(module.startswith("flashsac_runtime.") for module, _, _ in sources)
    assert variables and all(f"| `{v}` |" in page for v in variables), variables
    assert all(re.search(rf"\| `{re.escape(k)}` \| `[^`]+` \| \S", page) for k in added)  # a default and a text


def test_a_key_missing_from_the_config_is_missing_from_the_page() -> None:
    """Negative control: the rows come from the config, not from a list kept beside it."""
    images, patches = api.series_files("unilab", (configuration_doc.CONFIG,))
    pre, post = images[configuration_doc.CONFIG]
    text = post.decode()
    assert "\n  save_replay: false\n" in text
    entries = configuration_doc.config_entries(pre, text.replace("\n  save_replay: false\n", "\n").encode(), patches)
    names = [e.name for e in entries]
    assert "training.save_replay" not in names and "training.collector" in names
