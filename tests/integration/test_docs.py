"""Every command of README.md and docs/*.md runs as written (issue 33, point 6).

tests/integration/doc_commands.py finds each ```sh block, runs it in the environment its
`<!-- doc-test: ... -->` marker names (a `make run` server, the management walk-through's
server, a cluster, ...), in a private copy of the repository and private network and mount
namespaces (so TorchServe's fixed ports are free and /tmp is private), and checks each command:
exit status 0, no curl answer of 400 or more unless the doc says so, and the answer the doc
shows after it (`# {json}`, `# NNN {json}`, `# NNN "message"`, `# 6`).

The counts below are asserted so that skipped commands cannot pile up unseen: adding a command
to the docs means adding it here. Skipped, and why: `make test` (the whole test suite; CI runs
it), docs/openai.md's `make run` (the server README's first block started serves its curls), `make bench` (minutes of benchmarks; docs/performance.md's commands run one of them),
`docker build` / `docker run` (no Docker engine here; test_image.py checks the image's layout,
packages and Dockerfile), `kubectl apply` (no Kubernetes cluster; test_deploy.py checks the
manifests) and README's offline install_py_dep_per_model example (it needs a directory of wheels;
test_parity_python.py does the same with a wheel it builds), docs/gpu.md's worker built against
another torch (it would replace the tests' worker) and its whole GPU check (minutes; make test
runs tests/gpu). docs/history/ is a record of past measurements, not run.
"""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_commands  # noqa: E402
from conftest import BUILD, ROOT  # noqa: E402

COMMANDS_RUN = 104
COMMANDS_SKIPPED = 11


def test_every_block_is_marked_and_parsed():
    blocks = doc_commands.plan()
    n = sum(len(b["commands"]) for b in blocks)
    skipped = sum(len(b["commands"]) for b in blocks if b["marker"]["skip"]) + sum(
        1 for b in blocks if not b["marker"]["skip"] for c in b["commands"]
        if any(c["text"].startswith(p) for p, _ in b["marker"]["skip_lines"]))
    assert (n - skipped, skipped) == (COMMANDS_RUN, COMMANDS_SKIPPED), \
        "a command was added to or removed from the docs: update the counts in test_docs.py"
    for b in blocks:
        for c in b["commands"]:
            assert "..." not in c["text"] or c["text"].startswith("#"), \
                f"{c['where']}: a placeholder cannot run as written: {c['text']!r}"


def test_docs_commands_run_as_written():
    env = dict(os.environ, TS_BUILD=os.path.relpath(BUILD, ROOT))
    p = subprocess.run(["/usr/bin/python3", doc_commands.__file__], capture_output=True,
                       text=True, env=env, timeout=2400)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout)
    failures = "\n".join(f"{w}: {cmd[:120]!r}\n    {why}" for w, cmd, why in r["failures"])
    assert not r["failures"], failures
    assert r["ran"] == COMMANDS_RUN, r
    assert len(r["skipped"]) == COMMANDS_SKIPPED, r["skipped"]
    for where, cmd, why in r["skipped"]:
        assert why, (where, cmd)


@pytest.mark.parametrize("text,want", [
    ('curl a  # {"a": 1}', [("curl a", ['#> {"a": 1}'])]),
    ("curl a \\\n  -d 'x\ny'\n# 400 \"bad\"\n\nls", [("curl a \\\n  -d 'x\ny'", ['# 400 "bad"']),
                                                     ("ls", [])]),
    ("X=$(a |\n  b)\n# 6", [("X=$(a |\n  b)", ["# 6"])]),
    ("cat > f <<'EOF'\n# not a comment\nEOF\nls", [("cat > f <<'EOF'\n# not a comment\nEOF", []),
                                                    ("ls", [])]),
])
def test_commands_are_split_as_bash_reads_them(text, want):
    got = [(c["text"], c["comments"]) for c in doc_commands.split_commands(text)]
    assert got == want


@pytest.mark.parametrize("comments,rc,out,err,ok", [
    (['# {"status": "a ... b"}'], 0, '{"status": "a x y b"}', "@@HTTP 200@@\n", True),
    (['# {"status": "a"}'], 0, '{"status": "b"}', "@@HTTP 200@@\n", False),
    ([], 0, "{}", "@@HTTP 400@@\n", False),
    (['# 400 "too big"'], 0, '{"message": "too big"}', "@@HTTP 400@@\n", True),
    (["# 6"], 0, "6", "@@HTTP 200@@\n", True),
    (["#> 2.0"], 0, "5", "@@HTTP 200@@\n", True),
    ([], 1, "", "", False),
])
def test_expectations(comments, rc, out, err, ok):
    assert (doc_commands.check({"comments": comments}, rc, out, err) is None) == ok
