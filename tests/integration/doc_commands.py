#!/usr/bin/python3
"""Runs every ```sh block of README.md and docs/*.md as written (tests/integration/test_docs.py
calls it; it is no test itself).

    tests/integration/doc_commands.py [--list]      --list: the plan, nothing run

Each block is preceded by a marker that says where it runs:

    <!-- doc-test: in ENV -->                  run the block in environment ENV
    <!-- doc-test: starts ENV -->              its last command (not skipped) starts ENV (a
                                               server, a cluster), the rest of the block runs
                                               in it
    <!-- doc-test: skip: REASON -->            not run, and why (no Docker engine, ...)
    ...; skip-line PREFIX: REASON              in a block that runs: its commands that start
                                               with PREFIX are not run

ENVS below says what each environment is. The commands run in a private copy of the repository
(its files as in the work tree, model-store/ copied, build/ linked), inside private network
and mount namespaces (unshare): TorchServe's ports 8080-8082 and 7070-7071 are free there
whatever runs on the machine, and /tmp is a private tmpfs, so that commands run exactly as
written. Every command must exit 0; every curl must get a status below 400 unless the comment
after it says otherwise. A comment after a command (on its line after two spaces, or on the
next line) that reads `# {json}`, `# [json]`, `# NNN {json}` or `# NNN "message"` is its
expected answer: the status, and the JSON ("..." in a string matches anything) or the message.
Environments run one after the other, in the order they first appear; blocks in document order
(README.md, then docs/ by name).

Prints one JSON object: {"ran": N, "skipped": [[where, command, reason]...], "failures": [...]}.
"""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(ROOT, os.environ.get("TS_BUILD", "build"))
DOCS = ["README.md"] + sorted(os.path.join("docs", n) for n in os.listdir(os.path.join(ROOT, "docs"))
                              if n.endswith(".md"))

# what each environment is; "starts" environments are started by a block's first command,
# which is ready when it prints `ready` on stdout
ENVS = {
    # nothing running: the block starts and stops its own server
    "fresh": {},
    # `make run`: every example model, the repository's config.properties
    "make-run": {"ready": "Model server started."},
    # deploy/run-cluster.sh (README.md's and docs/deploy.md's, each its own)
    "cluster-readme": {"ready": "balancer "},
    "cluster": {"ready": "balancer "},
    # token authorization on (the repository's config without disable_token_authorization),
    # the model API enabled, mlp and identity_text loaded; keys in ./key_file.json
    "tokens": {"server": ["--models", "mlp=mlp.mar", "identity_text=identity_text.mar",
                          "--enable-model-api"], "tokens": True},
    # the management walk-through: the model API enabled and no model loaded yet
    "management": {"server": ["--enable-model-api"]},
}
BLOCK_TIMEOUT = 600
START_TIMEOUT = 900

MARKER = re.compile(r"<!-- doc-test: (.*?) -->\n```sh\n(.*?)^```", re.S | re.M)
ANY_SH = re.compile(r"^```sh\n", re.M)


# ---------------------------------------------------------------- parsing

def complete(text):
    """Whether bash parses text as whole commands (no open quote, $( or pipe)."""
    return subprocess.run(["bash", "-n", "-c", text], capture_output=True).returncode == 0


def split_commands(text):
    """The commands of a block: lines joined until bash parses them as a whole (continuation
    lines, quotes over several lines, a pipe at a line's end), a here-document kept with its
    command, comment lines attached to the command before them (its expected answer)."""
    cmds = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.lstrip().startswith("#"):
            if cmds and cmds[-1]["open"]:
                cmds[-1]["comments"].append(line.strip())
            i += 1
            continue
        start = i
        body = [line]
        heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        if heredoc:
            while i + 1 < len(lines) and lines[i].strip() != heredoc.group(1):
                i += 1
                body.append(lines[i])
        else:
            while (body[-1].endswith("\\") or not complete("\n".join(body))) and \
                    i + 1 < len(lines):
                i += 1
                body.append(lines[i])
        i += 1
        inline = None
        last = body[0] if heredoc else body[-1]
        im = re.search(r"\s{2,}#\s?(.*)$", last)
        if im and complete("\n".join(body[:-1] + [last[:im.start()]]) if not heredoc else "true"):
            inline = im.group(1)
            if not heredoc:
                body[-1] = last[:im.start()]
        # an inline comment is an expected answer only in the JSON or status forms (`# 2.0`
        # after a command is a remark); a comment line may also be a bare number (`# 6`)
        cmds.append({"text": "\n".join(body), "line": start,
                     "comments": ["#> " + inline] if inline else [], "open": True})
        # a blank line ends the comments that belong to a command
        if i < len(lines) and not lines[i].strip():
            cmds[-1]["open"] = False
    for c in cmds:
        del c["open"]
    return cmds


def parse_marker(spec):
    out = {"skip": None, "env": None, "starts": False, "skip_lines": []}
    if spec.startswith("skip:"):  # the rest is the reason, ';' and all
        out["skip"] = spec[5:].strip()
        return out
    for clause in (c.strip() for c in spec.split(";")):
        if clause.startswith("skip:"):
            out["skip"] = clause[5:].strip()
        elif clause.startswith("skip-line "):
            prefix, _, reason = clause[10:].partition(":")
            out["skip_lines"].append((prefix.strip().strip('"'), reason.strip()))
        elif clause.startswith("in "):
            out["env"] = clause[3:].strip()
        elif clause.startswith("starts "):
            out["env"] = clause[7:].strip()
            out["starts"] = True
        else:
            raise ValueError(f"unknown doc-test clause {clause!r}")
    if not out["skip"] and out["env"] not in ENVS:
        raise ValueError(f"doc-test: unknown environment {out['env']!r} in {spec!r}")
    return out


def plan(root=ROOT):
    """Every block of the docs: [{"where": "file:line", "marker": ..., "commands": [...]}]; a
    ```sh block without a marker is an error."""
    blocks = []
    for doc in DOCS:
        text = open(os.path.join(root, doc)).read()
        marked = {m.start(2) for m in MARKER.finditer(text)}
        for m in ANY_SH.finditer(text):
            if m.end() not in marked:
                line = text[:m.start()].count("\n") + 1
                raise ValueError(f"{doc}:{line}: a ```sh block without a <!-- doc-test: ... --> "
                                 "marker (tests/integration/doc_commands.py says which)")
        for m in MARKER.finditer(text):
            line = text[:m.start(2)].count("\n") + 1
            cmds = split_commands(m.group(2))
            for c in cmds:
                c["where"] = f"{doc}:{line + c['line']}"
            blocks.append({"where": f"{doc}:{line}", "marker": parse_marker(m.group(1)),
                           "commands": cmds})
    return blocks


# ---------------------------------------------------------------- expectations

def expectation(comments):
    """(status or None, json value or None, message or None) from a command's comments."""
    for c in comments:
        inline = c.startswith("#> ")
        c = c.lstrip("#>").strip()
        m = re.match(r"^(\d{3})\s+(.*)$", c)
        status, rest = (int(m.group(1)), m.group(2)) if m else (None, c)
        if not rest[:1] in ("{", "[", '"') and (inline or status or not re.fullmatch(
                r"-?\d+(\.\d+)?", rest)):
            continue
        try:
            value = json.loads(rest)
        except ValueError:
            continue
        if isinstance(value, str):
            return status, None, value
        return status, value, None
    return None, None, None


def matches(want, got):
    if isinstance(want, dict):
        return isinstance(got, dict) and set(want) == set(got) and all(
            matches(v, got[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(got, list) and len(want) == len(got) and all(
            matches(a, b) for a, b in zip(want, got))
    if isinstance(want, str) and "..." in want:
        pat = ".*".join(re.escape(p) for p in want.split("..."))
        return isinstance(got, str) and re.fullmatch(pat, got, re.S) is not None
    return want == got


def check(cmd, rc, out, err):
    """What is wrong with one command's run, or None."""
    statuses = [int(s) for s in re.findall(r"@@HTTP (\d+)@@", err)]
    err = re.sub(r"@@HTTP \d+@@\n?", "", err)
    status, value, message = expectation(cmd["comments"])
    if rc != 0:
        return f"exit status {rc}; stderr: {err[-800:]}; stdout: {out[-400:]}"
    if status is not None:
        if not statuses or statuses[-1] != status:
            return f"expected HTTP {status}, got {statuses}: {out[-400:]}"
    else:
        bad = [s for s in statuses if s >= 400 or s == 0]
        if bad:
            return f"HTTP {bad}: {out[-600:]}"
    if value is not None:
        try:
            got = json.loads(out)
        except ValueError:
            return f"expected JSON {json.dumps(value)}, got {out[-600:]!r}"
        if not matches(value, got):
            return f"expected {json.dumps(value)}, got {json.dumps(got)[:800]}"
    if message is not None:
        try:
            got = json.loads(out)
            text = got.get("message", "") if isinstance(got, dict) else out
        except ValueError:
            text = out
        if message not in text:
            return f"expected a message {message!r}, got {out[-600:]!r}"
    return None


# ---------------------------------------------------------------- running

def loopback_up():
    """`ip link set lo up` in this network namespace (SIOCGIFFLAGS / SIOCSIFFLAGS)."""
    import fcntl
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ifr = struct.pack("16sH14x", b"lo", 0)
    flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, ifr))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 1))
    s.close()


def make_copy(dest):
    """The work tree's files (tracked, and untracked ones git does not ignore), model-store/
    copied and build/ linked, timestamps kept (so that make finds everything built)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for f in files:
        f = f.decode()
        src = os.path.join(ROOT, f)
        if not f or not os.path.isfile(src):
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, f)) or dest, exist_ok=True)
        shutil.copy2(src, os.path.join(dest, f))
    shutil.copytree(os.path.join(ROOT, "model-store"), os.path.join(dest, "model-store"))
    os.symlink(BUILD, os.path.join(dest, "build"))


def shell_env(wrap):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "TS_BUILD",
                        "PYTEST_CURRENT_TEST")}
    env["PATH"] = wrap + ":" + env.get("PATH", "/usr/bin:/bin")
    env["TMPDIR"] = "/tmp"
    return env


def run_block(copy, env, cmds, skip_lines, results):
    script = ["set -o pipefail"]
    todo = []
    for k, c in enumerate(cmds):
        reason = next((r for p, r in skip_lines if c["text"].startswith(p)), None)
        if reason:
            results["skipped"].append([c["where"], c["text"], reason])
            continue
        todo.append(c)
        script.append(f"printf '\\n@@DOC {k}@@\\n'; printf '\\n@@DOC {k}@@\\n' >&2")
        script.append(c["text"])
        script.append(f"printf '\\n@@RC {k} %d@@\\n' $?")
    if not todo:
        return
    p = subprocess.run(["bash", "-c", "\n".join(script) + "\n"], cwd=copy, env=env,
                       capture_output=True, text=True, timeout=BLOCK_TIMEOUT,
                       errors="replace")
    outs = dict(re.findall(r"\n@@DOC (\d+)@@\n(.*?)(?=\n@@RC \d+ -?\d+@@)", p.stdout, re.S))
    rcs = dict(re.findall(r"\n@@RC (\d+) (-?\d+)@@", p.stdout))
    errs = dict(re.findall(r"\n@@DOC (\d+)@@\n(.*?)(?=\n@@DOC |\Z)", p.stderr, re.S))
    for k, c in enumerate(cmds):
        if c not in todo:
            continue
        results["ran"] += 1
        if str(k) not in rcs:
            results["failures"].append([c["where"], c["text"],
                                        f"did not run (the block stopped): {p.stderr[-800:]}"])
            continue
        why = check(c, int(rcs[str(k)]), outs.get(str(k), ""), errs.get(str(k), ""))
        if why:
            results["failures"].append([c["where"], c["text"], why])


def start_server(copy, env, spec):
    cfg = os.path.join(copy, "config.properties")
    if spec.get("tokens"):
        text = open(cfg).read()
        cfg = os.path.join(copy, "tokens.properties")
        with open(cfg, "w") as f:
            f.write(re.sub(r"^disable_token_authorization=.*\n", "", text, flags=re.M))
    args = [os.path.join(copy, "build", "bin", "torchserve-c"), "--start", "--ncs",
            "--model-store", "model-store", "--ts-config", cfg] + spec["server"]
    p = subprocess.run(args, cwd=copy, env=env, capture_output=True, text=True,
                       timeout=START_TIMEOUT)
    if p.returncode != 0:
        raise RuntimeError(f"could not start {args}: {p.stdout} {p.stderr}")
    return lambda: subprocess.run([args[0], "--stop", "--ts-config", cfg], cwd=copy, env=env,
                                  capture_output=True, timeout=120)


def start_by_doc(copy, env, cmd, ready):
    """The block's first command in the background, until it prints the ready line."""
    log = open(os.path.join(copy, ".doc-env.log"), "w")
    p = subprocess.Popen(["bash", "-c", "exec " + cmd["text"]], cwd=copy, env=env,
                         stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    deadline = time.time() + START_TIMEOUT
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        if line.startswith(ready):
            break
    else:
        line = ""

    def stop():
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    if not line.startswith(ready):
        stop()
        log.close()
        return None, open(os.path.join(copy, ".doc-env.log")).read()[-2000:]
    return stop, None


def kill_leftovers():
    """Whatever a failed block left running in this private namespace (only our processes
    live in it), except this process and its ancestors."""
    me = os.getpid()
    mine = os.readlink("/proc/self/ns/net")
    keep = set()
    pid = me
    while pid > 1:
        keep.add(pid)
        try:
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) not in keep:
            try:
                if os.readlink(f"/proc/{d}/ns/net") == mine:
                    os.kill(int(d), signal.SIGKILL)
            except OSError:
                pass


def run_all(blocks):
    results = {"ran": 0, "skipped": [], "failures": []}
    loopback_up()
    copy = "/tmp/repo"
    make_copy(copy)
    wrap = "/tmp/doc-wrap"
    os.makedirs(wrap)
    with open(os.path.join(wrap, "curl"), "w") as f:
        f.write("#!/bin/sh\nexec /usr/bin/curl -w '%{stderr}@@HTTP %{http_code}@@\\n' \"$@\"\n")
    os.chmod(os.path.join(wrap, "curl"), 0o755)
    env = shell_env(wrap)
    order = []
    for b in blocks:
        if b["marker"]["skip"]:
            for c in b["commands"]:
                results["skipped"].append([c["where"], c["text"], b["marker"]["skip"]])
        elif b["marker"]["env"] not in order:
            order.append(b["marker"]["env"])
    for name in order:
        spec = ENVS[name]
        stop = None
        if "server" in spec:
            stop = start_server(copy, env, spec)
        for b in blocks:
            mk = b["marker"]
            if mk["skip"] or mk["env"] != name:
                continue
            cmds = b["commands"]
            try:
                if mk["starts"]:
                    k = max(n for n, c in enumerate(cmds) if not any(
                        c["text"].startswith(p) for p, _ in mk["skip_lines"]))
                    run_block(copy, env, cmds[:k], mk["skip_lines"], results)
                    stop, why = start_by_doc(copy, env, cmds[k], spec["ready"])
                    results["ran"] += 1
                    if not stop:
                        results["failures"].append([cmds[k]["where"], cmds[k]["text"],
                                                    f"never printed {spec['ready']!r}: {why}"])
                        break
                    cmds = cmds[k + 1:]
                run_block(copy, env, cmds, mk["skip_lines"], results)
            except subprocess.TimeoutExpired:
                results["failures"].append([b["where"], "", f"timed out after {BLOCK_TIMEOUT} s"])
        if stop:
            stop()
        kill_leftovers()
    return results


def main():
    blocks = plan()
    if "--list" in sys.argv:
        for b in blocks:
            print(b["where"], b["marker"])
            for c in b["commands"]:
                print("   ", c["where"], repr(c["text"][:70]), c["comments"])
        return 0
    if "--inside" not in sys.argv:
        # a private network namespace (the docs' fixed ports) and /tmp (the docs' paths); a
        # checkout under /tmp (CI clones into mktemp -d) is seen at /mnt there, bound before the
        # private /tmp hides it
        inside = "mount -t tmpfs tmpfs /tmp && exec \"$0\" \"$1\" --inside"
        root = ROOT
        if ROOT == "/tmp" or ROOT.startswith("/tmp/"):
            inside = "mount --bind \"$2\" /mnt && " + inside
            root = "/mnt"
        return subprocess.run(["unshare", "--map-root-user", "--net", "--mount", "sh", "-c",
                               inside, sys.executable,
                               os.path.join(root, os.path.relpath(os.path.abspath(__file__), ROOT)),
                               ROOT]).returncode
    print(json.dumps(run_all(blocks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
