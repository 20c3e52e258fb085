#!/usr/bin/env python3
"""Runs a command under the seccomp profile ticketingd.json, as a container
runtime would load it for a Localhost profile: the calls it lists are
allowed, every other call fails with the profile's errno. Calls unknown on
this machine's architecture are skipped, as runtimes do.

Usage: deploy/seccomp/confine.py PROFILE.json COMMAND [ARG...]
Needs python3-seccomp (Debian package).
"""
import errno, json, os, sys
import seccomp

with open(sys.argv[1]) as f:
    prof = json.load(f)
if prof["defaultAction"] != "SCMP_ACT_ERRNO":
    sys.exit("confine.py: only profiles with defaultAction SCMP_ACT_ERRNO")
flt = seccomp.SyscallFilter(seccomp.ERRNO(prof.get("defaultErrnoRet", errno.EPERM)))
for rule in prof["syscalls"]:
    if rule["action"] != "SCMP_ACT_ALLOW" or rule.get("args"):
        sys.exit("confine.py: only plain SCMP_ACT_ALLOW rules")
    for name in rule["names"]:
        try:
            flt.add_rule(seccomp.ALLOW, name)
        except (RuntimeError, ValueError, OSError):
            pass  # not a call of this architecture
flt.load()  # sets no_new_privs, like allowPrivilegeEscalation: false
os.execvp(sys.argv[2], sys.argv[2:])
