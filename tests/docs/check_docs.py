#!/usr/bin/env python3
"""Runs the shell blocks of README.md and docs/*.md, so that the docs stay true.

Usage: check_docs.py BUILD_DIR [FILE.md ...]   (run as root; ctest docs_check)
       check_docs.py --list [FILE.md ...]       (only show the blocks and their fate)

Which blocks are shell blocks:
  - fenced ```sh, ```bash, ```shell and ```console blocks. In a console
    block, the lines starting with "$ " are the commands (with their "\"
    continuation lines); the other lines are output, compared only when the
    block is marked `output`.
    In the others, every line is a command.
  - every fence names its language, so a ``` block without one is an ERROR:
    output samples and other fragments are fenced ```text (or yaml, c, ...),
    and commands for another shell than bash say so (```zsh) and are not run.
  - an indented code block whose first line looks like a command (starts with
    "$ ", "VAR=", a program on PATH, a shell builtin or a known command, or
    scripts/, build/, ./build/, tests/, bench/) is an ERROR: fence it as ```sh.

Every shell block runs, unless an HTML comment right before it (blank lines
allowed in between) says otherwise:
  <!-- docs-check: skip (REASON) -->   not run here; a reason is required
  <!-- docs-check: exit N -->           must exit with status N (default 0)
  <!-- docs-check: daemon (ready: URL) -->
                                        starts a server in the foreground: run
                                        in the background until URL answers 2xx;
                                        the file's cluster and any earlier daemon
                                        are stopped first; it runs until the next
                                        daemon block or the end of the file
  <!-- docs-check: timeout S -->        its bound in seconds (default 60)
  <!-- docs-check: output -->           (console blocks) what the commands print
                                        must be exactly the block's output lines
Markers combine with ";", e.g. <!-- docs-check: exit 88; timeout 90 -->.
A file that starts (anywhere before its first block) with
  <!-- docs-check: file cluster -->
gets the local 3-node cluster of scripts/cluster.sh (client ports 7400, 7410,
7420, secrets in .run/cluster/) started before its first block.

How blocks run: the whole check runs in a private network namespace (so the
docs keep the natural ports 7400... without meeting other tests) and a private
mount namespace with an empty tmpfs on /usr/local (so `cmake --install` into
/usr/local stays private). Files run one after another, each in a fresh
scratch directory that mirrors the repository (every top-level
entry is a symlink to the source tree; build/ links to BUILD_DIR), with
BUILD_DIR first on PATH. Each block runs with `bash -e`, in its own process
group, from the scratch directory; its shell variables carry over to the
next block of the same file (as in one shell session), the working
directory does not. When the file is done, every process a block left behind
is stopped. A block that reconfigures the build under test fails.

Prints one line per block and ends with
  docs-check: N blocks ran, M skipped (with reasons), F failed
Exit 0 when nothing failed, 1 otherwise, 77 when the namespaces cannot be
made (not root, or unshare not permitted) and for a sanitizer build.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

SHELL_LANGS = {"sh", "bash", "shell", "console"}
KNOWN_CMDS = {"kubectl", "docker", "systemctl", "sudo", "helm", "psql", "etcdctl",
              "redis-cli", "ticketingd", "ticketctl", "ticketing-bench", "curl", "cmake",
              "make", "cc", "gcc", "clang", "openssl", "export", "cd", "until", "for",
              "while", "umask", "head", "kill", "mkdir", "promtool", "pkg-config", "ctest",
              "git", "apt-get", "ldconfig", "journalctl", "source", ".", "set", "unset", "echo",
              "eval", "exec", "trap", "complete", "autoload", "fpath", "printf", "if"}
PATH_PREFIXES = ("scripts/", "build/", "./build/", "tests/", "bench/", "./")
MARKER = re.compile(r"^\s*<!--\s*docs-check:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")

SRC = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class Block:
    def __init__(self, path, line, lang, lines, markers, kind):
        self.path, self.line, self.lang, self.lines = path, line, lang, lines
        self.markers, self.kind = markers, kind  # kind: shell, fragment, error
        self.error = None

    def where(self):
        return f"{os.path.relpath(self.path, SRC)}:{self.line}"


def looks_like_command(first):
    s = first.strip()
    if s.startswith("$ "):
        return True
    words = s.split()
    if words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        return True  # VAR=value [cmd]
    w = words[0].lstrip("(")
    if w in KNOWN_CMDS or w.startswith(PATH_PREFIXES):
        return True
    return shutil.which(w) is not None and re.match(r"^[a-z][a-z0-9_.-]*$", w) is not None


def parse_markers(text):
    """'skip (why); exit 88' -> dict; raises ValueError on a bad marker."""
    out, parts, depth, cur = {}, [], 0, ""
    for ch in text:  # split at ";" outside parentheses
        depth += (ch == "(") - (ch == ")")
        if ch == ";" and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    for part in [p.strip() for p in parts if p.strip()]:
        m = re.match(r"^skip\s*(?:\((.*)\))?$", part, re.S)
        if m:
            if not (m.group(1) or "").strip():
                raise ValueError("a skip marker needs a reason: skip (why)")
            out["skip"] = m.group(1).strip()
            continue
        m = re.match(r"^exit\s+(\d+)$", part)
        if m:
            out["exit"] = int(m.group(1))
            continue
        m = re.match(r"^timeout\s+(\d+)$", part)
        if m:
            out["timeout"] = int(m.group(1))
            continue
        m = re.match(r"^daemon\s*\(ready:\s*(\S+)\s*\)$", part)
        if m:
            out["daemon"] = m.group(1)
            continue
        if part == "output":
            out["output"] = True
            continue
        m = re.match(r"^file\s+cluster$", part)
        if m:
            out["file_cluster"] = True
            continue
        raise ValueError(f"unknown docs-check marker '{part}'")
    return out


def parse(path):
    """Returns (blocks, file_markers, errors)."""
    blocks, errors, file_markers = [], [], {}
    lines = open(path, encoding="utf-8").read().split("\n")
    pending, pending_line = None, 0
    i, prev_blank, container = 0, True, 0
    seen_block = False
    while i < len(lines):
        ln = lines[i]
        m = MARKER.match(ln)
        if m:
            try:
                mk = parse_markers(m.group(1))
            except ValueError as e:
                errors.append(f"{os.path.relpath(path, SRC)}:{i + 1}: {e}")
                mk = {"skip": "its docs-check marker is not valid (counted as failed above)"}
            if mk.pop("file_cluster", False):
                if seen_block:
                    errors.append(f"{os.path.relpath(path, SRC)}:{i + 1}: "
                                  "'file cluster' must come before the first block")
                file_markers["cluster"] = True
            if mk:
                pending, pending_line = mk, i + 1
            i += 1
            continue
        f = FENCE.match(ln)
        if f:
            indent, fence, lang = len(f.group(1)), f.group(2), f.group(3).lower()
            body, j = [], i + 1
            while j < len(lines) and not (lines[j].strip().startswith(fence[:3]) and
                                          lines[j].strip().strip(fence[0]) == ""):
                body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
                j += 1
            first = next((b for b in body if b.strip() and not b.strip().startswith("#")), "")
            if lang in SHELL_LANGS:
                kind = "shell"
            elif lang == "":
                kind = "error"
            else:
                kind = "fragment"
            b = Block(path, i + 1, lang or "plain", body, pending or {}, kind)
            if kind == "error":
                b.error = ("a ``` block without a language: ```sh for commands, "
                           "```text for output and other fragments")
            if pending and kind != "shell":
                errors.append(f"{b.where()}: docs-check marker (line {pending_line}) "
                              "before a block that is not a shell block")
            blocks.append(b)
            seen_block = True
            pending = None
            i, prev_blank = j + 1, False
            continue
        # Indented code block: after a blank line, 4 or more columns past
        # the enclosing list item's text.
        ind = len(ln) - len(ln.lstrip(" "))
        if ln.strip():
            lm = re.match(r"^(\s*)([-*]|\d+\.)\s+", ln)
            if prev_blank and ind >= container + 4:
                body, j = [], i
                while j < len(lines) and (not lines[j].strip() or
                                          len(lines[j]) - len(lines[j].lstrip(" ")) >= ind):
                    body.append(lines[j][ind:])
                    j += 1
                while body and not body[-1].strip():
                    body.pop()
                first = next((b for b in body if b.strip() and not b.startswith("#")), "")
                if looks_like_command(first):
                    b = Block(path, i + 1, "indented", body, {}, "error")
                    b.error = "an indented code block that looks like commands: fence it as ```sh"
                    blocks.append(b)
                i, prev_blank = j, False
                continue
            if lm:
                container = len(lm.group(0))
            elif ind < container:
                container = ind if ind > 0 else 0
            elif ind == 0:
                container = 0
            if pending:
                errors.append(f"{os.path.relpath(path, SRC)}:{pending_line}: docs-check marker "
                              "not followed by a block")
                pending = None
        prev_blank = not ln.strip()
        i += 1
    return blocks, file_markers, errors


def script_of(b):
    """The commands of a shell block, as one bash script."""
    if b.lang != "console":
        return "\n".join(b.lines) + "\n"
    cmds, cont = [], False
    for ln in b.lines:
        if cont:
            cmds.append(ln)
        elif ln.startswith("$ "):
            cmds.append(ln[2:])
        else:
            continue
        cont = ln.rstrip().endswith("\\")
    return "\n".join(cmds) + "\n"


# Saves the block's shell variables (exported or not; not bash's own, not
# read-only ones) for the next block of the file.
SAVE_VARS = r"""declare -p $(compgen -v | grep -vE '^(BASH.*|PWD|OLDPWD|SHLVL|_|EUID|UID|PPID|SHELLOPTS|FUNCNAME|GROUPS|DIRSTACK|PIPESTATUS|RANDOM|SRANDOM|LINENO|SECONDS|HISTCMD|EPOCH.*|COMP.*|HOST.*|MACHTYPE|OSTYPE|OPT.*|IFS|PS[0-9]|HIST.*|COLUMNS|LINES|MAILCHECK)$') 2>/dev/null | grep -v '^declare -[a-zA-Z]*r' > "$1"
"""


def expected_output(b):
    """The output lines of a console block (neither "$ " lines nor their continuations)."""
    out, cont = [], False
    for ln in b.lines:
        if cont or ln.startswith("$ "):
            cont = ln.rstrip().endswith("\\")
            continue
        out.append(ln)
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out)


def kill_group(pgid):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        for _ in range(50):
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def build_stamp(build):
    """What a configure step run by a block would change in the build tree."""
    try:
        return open(os.path.join(build, "CTestTestfile.cmake")).read()
    except OSError:
        return None


def make_scratch(build):
    d = tempfile.mkdtemp(prefix="docs-check-")
    for name in os.listdir(SRC):
        if name in (".git", ".run") or name.startswith("build"):
            continue
        os.symlink(os.path.join(SRC, name), os.path.join(d, name))
    os.symlink(build, os.path.join(d, "build"))
    return d


def wait_url(url, seconds, proc):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"exited with status {proc.returncode} before {url} answered"
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if 200 <= r.status < 300:
                    return None
        except Exception:
            pass
        time.sleep(0.2)
    return f"{url} did not answer within {seconds} s"


def run_file(path, build, verbose):
    """Runs one file's blocks; returns (ran, skipped, failed, lines)."""
    blocks, fm, errors = parse(path)
    ran = skipped = failed = 0
    out = []
    for e in errors:
        out.append(f"FAIL {e}")
        failed += 1
    shell = [b for b in blocks if b.kind in ("shell", "error")]
    if not shell:
        return ran, skipped, failed, out
    scratch = make_scratch(build)
    envfile = os.path.join(scratch, ".docs-check-env")
    savefile = os.path.join(scratch, ".docs-check-save")
    with open(savefile, "w") as f:
        f.write(SAVE_VARS)
    env = dict(os.environ)
    env["PATH"] = build + ":" + env.get("PATH", "")
    env["HOME"] = scratch
    for k in ("TICKETING_ADDR", "TICKETING_SECRET_FILE", "TICKETING_PEER_SECRET_FILE"):
        env.pop(k, None)
    groups, daemon = [], None
    stamp = build_stamp(build)
    try:
        if fm.get("cluster"):
            r = subprocess.run(["scripts/cluster.sh", "start"], cwd=scratch, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=60)
            if r.returncode != 0:
                out.append(f"FAIL {os.path.relpath(path, SRC)}: scripts/cluster.sh start: "
                           f"{r.stdout.strip()}")
                return ran, skipped, failed + len(shell), out
        for b in shell:
            if b.kind == "error":
                out.append(f"FAIL {b.where()}: {b.error}")
                failed += 1
                continue
            if "skip" in b.markers:
                out.append(f"skip {b.where()}: {b.markers['skip']}")
                skipped += 1
                continue
            want = b.markers.get("exit", 0)
            limit = b.markers.get("timeout", 60)
            logf = os.path.join(scratch, f".docs-check-{b.line}.log")
            script = ("set -e\n"
                      f"[ -f {envfile} ] && . {envfile}\n"
                      f"trap '. {savefile} {envfile}' EXIT\n" + script_of(b))
            if "daemon" in b.markers:
                if daemon is not None:
                    kill_group(daemon)
                    daemon = None
                subprocess.run(["scripts/cluster.sh", "stop"], cwd=scratch, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            t0 = time.monotonic()
            with open(logf, "w") as lf:
                p = subprocess.Popen(["bash", "-c", script], cwd=scratch, env=env,
                                     stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT,
                                     start_new_session=True)
            groups.append(p.pid)
            why = None
            if "daemon" in b.markers:
                why = wait_url(b.markers["daemon"], limit, p)
                daemon = p.pid
            else:
                try:
                    rc = p.wait(timeout=limit)
                    if rc != want:
                        why = f"exit status {rc}, expected {want}"
                    elif b.markers.get("output"):
                        got = open(logf, errors="replace").read().rstrip()
                        if got != expected_output(b):
                            why = "output differs from the block's:\n" + expected_output(b)
                except subprocess.TimeoutExpired:
                    kill_group(p.pid)
                    p.wait()
                    why = f"timed out after {limit} s"
            took = time.monotonic() - t0
            ran += 1
            if not why and build_stamp(build) != stamp:
                why = ("it reconfigured the build directory under test (run cmake on "
                       f"{SRC} again); such a block must be skipped")
                stamp = build_stamp(build)
            if why:
                failed += 1
                log = open(logf, errors="replace").read()
                out.append(f"FAIL {b.where()} ({took:.1f} s): {why}")
                out.append("  | " + "\n  | ".join(script_of(b).rstrip().split("\n")))
                out.append("  output:\n  > " + "\n  > ".join(log.rstrip()[-3000:].split("\n")))
            else:
                out.append(f"ok   {b.where()} ({took:.1f} s)")
                if verbose:
                    out.append(open(logf, errors="replace").read())
    finally:
        for g in groups:
            kill_group(g)
        subprocess.run(["scripts/cluster.sh", "stop"], cwd=scratch, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if os.environ.get("TK_KEEP_DOCS_CHECK"):
            out.append(f"     scratch kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return ran, skipped, failed, out


def default_files():
    docs = os.path.join(SRC, "docs")
    return [os.path.join(SRC, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))


def inner(build, files, verbose):
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/usr/local"], check=True)
    ran = skipped = failed = 0
    for f in files:
        r, s, fl, out = run_file(f, build, verbose)
        ran, skipped, failed = ran + r, skipped + s, failed + fl
        for ln in out:
            print(ln, flush=True)
    return ran, skipped, failed


def main():
    args = sys.argv[1:]
    if args and args[0] == "--list":
        rc = 0
        for f in [os.path.abspath(a) for a in args[1:]] or default_files():
            blocks, fm, errors = parse(f)
            for e in errors:
                print("error", e)
                rc = 1
            for b in blocks:
                fate = b.kind
                if b.kind == "shell":
                    fate = ("skip: " + b.markers["skip"]) if "skip" in b.markers else \
                        "run " + ", ".join(f"{k} {v}" for k, v in b.markers.items())
                elif b.kind == "error":
                    rc = 1
                    fate = "ERROR: " + b.error
                print(f"{b.where():28} {b.lang:9} {fate}")
        return rc
    verbose = "-v" in args
    args = [a for a in args if a != "-v"]
    if not args:
        print(__doc__, file=sys.stderr)
        return 64
    build = os.path.realpath(args[0])
    files = [os.path.abspath(a) for a in args[1:]] or default_files()
    if not os.path.exists(os.path.join(build, "ticketingd")):
        print(f"docs-check: no ticketingd in {build}", file=sys.stderr)
        return 1
    cache = os.path.join(build, "CMakeCache.txt")
    if os.path.exists(cache) and re.search(r"^TK_SANITIZE:STRING=\S", open(cache).read(), re.M):
        print("docs-check: SKIP: a sanitizer build; the docs' commands are for a plain build "
              "(its library needs no sanitizer runtime)")
        return 77
    if os.environ.get("TK_DOCS_CHECK_INNER") != "1":
        if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
            print("docs-check: SKIP: needs root, unshare and ip (private namespaces)")
            return 77
        probe = subprocess.run(["unshare", "--net", "--mount", "true"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if probe.returncode != 0:
            print("docs-check: SKIP: unshare --net --mount is not permitted here")
            return 77
        env = dict(os.environ, TK_DOCS_CHECK_INNER="1")
        return subprocess.run(["unshare", "--net", "--mount", sys.executable,
                               os.path.abspath(__file__)] + (["-v"] if verbose else []) +
                              [build] + files, env=env).returncode
    ran, skipped, failed = inner(build, files, verbose)
    print(f"docs-check: {ran} blocks ran, {skipped} skipped (with reasons), {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
