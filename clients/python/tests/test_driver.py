"""The conformance driver speaks its protocol: one JSON reply per command."""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support import PYDIR, Server  # noqa: E402


class Driver(unittest.TestCase):
    def test_session(self):
        srv = Server()
        try:
            cmds = [{"op": "ping"},
                    {"op": "acquire", "key": "d-1", "lease_ms": 10000, "wait_ms": 0},
                    {"op": "acquire", "key": "d-1", "lease_ms": 10000, "wait_ms": 0},
                    {"op": "query", "key": "d-1"},
                    None,  # the token of the first acquire goes here
                    {"op": "release", "key": "d-1", "token": 1},
                    {"op": "acquire", "key": "bad key", "lease_ms": 10000, "wait_ms": 0},
                    "not json",
                    {"op": "sleep", "ms": 10},
                    {"op": "ring"},
                    {"op": "stats"},
                    {"op": "close"}]
            p = subprocess.Popen([sys.executable, os.path.join(PYDIR, "ticketing_driver.py"),
                                  "--addrs", srv.addrs, "--secret-file", srv.secret,
                                  "--owner", "drv-test", "--response-grace-ms", "1000"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            replies = []
            for cmd in cmds:
                if cmd is None:
                    cmd = {"op": "release", "key": "d-1", "token": replies[1]["token"]}
                p.stdin.write((cmd if isinstance(cmd, str) else json.dumps(cmd)) + "\n")
                p.stdin.flush()
                replies.append(json.loads(p.stdout.readline()))
            self.assertEqual(p.wait(30), 0)
            got = [r["outcome"] for r in replies]
            self.assertEqual(got, ["ANSWERED", "ACQUIRED", "BUSY", "ANSWERED", "RELEASED",
                                   "NOT_HELD", "INVALID", "DRIVER_ERROR", "OK", "ANSWERED", "OK",
                                   "OK"])
            self.assertGreater(replies[1]["token"], 0)
            self.assertEqual(replies[2]["token"], 0)
            self.assertEqual((replies[3]["held"], replies[3]["owner"], replies[3]["token"]),
                             (True, "drv-test", replies[1]["token"]))
            self.assertEqual(replies[4]["resent"], False)
            self.assertEqual((replies[9]["version"], replies[9]["body"]), (0, "-"))
            self.assertEqual(replies[10]["releases_queued"], 0)
            self.assertTrue(all(isinstance(r["elapsed_ms"], int) for r in replies))
            self.assertGreaterEqual(replies[8]["elapsed_ms"], 10)
        finally:
            srv.stop()


if __name__ == "__main__":
    unittest.main()
