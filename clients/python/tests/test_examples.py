"""Runs every example of clients/python/examples (the ones docs/client.md
shows) against a real ticketingd; the fencing one against a private
PostgreSQL as well, then checks the database directly."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support import PYDIR, REPO, Server, free_ports3  # noqa: E402

EXAMPLES = os.path.join(PYDIR, "examples")


def pg_bin():
    for d in [os.environ.get("PGBIN", "")] + sorted(glob.glob("/usr/lib/postgresql/*/bin")):
        if d and all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "pg_ctl", "psql")):
            return d
    return None


class Examples(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server()
        cls.env = dict(os.environ, TICKETING_ADDR=cls.srv.addrs,
                       TICKETING_SECRET_FILE=cls.srv.secret,
                       PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def run_example(self, name, env=None):
        p = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)], env=env or self.env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, f"{name} failed:\n{p.stdout}\n{p.stderr}")
        return p.stdout

    def test_every_example_is_tested(self):
        self.assertEqual(sorted(os.listdir(EXAMPLES)),
                         ["async_lock.py", "fencing_pg.py", "first_lock.py"])

    def test_docs_show_each_example_as_it_is(self):
        with open(os.path.join(REPO, "docs", "client.md")) as f:
            doc = f.read()
        for name in os.listdir(EXAMPLES):
            with open(os.path.join(EXAMPLES, name)) as f:
                self.assertIn(f.read().rstrip("\n"), doc, f"docs/client.md differs from {name}")

    def test_first_lock(self):
        out = self.run_example("first_lock.py")
        self.assertRegex(out, r"holding inventory/sku-1 with token \d+, \d+ ms of lease left")
        self.assertRegex(out, r"holding inventory/sku-1 again with token \d+")

    def test_async_lock(self):
        out = self.run_example("async_lock.py")
        self.assertIn("10 buyers served, tokens increasing: True", out)

    def test_fencing_pg(self):
        pgbin = pg_bin()
        if pgbin is None:
            self.skipTest("PostgreSQL server binaries not found")
        as_pg = []
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                self.skipTest("no runuser to start PostgreSQL as postgres")
            try:
                import pwd
                pwd.getpwnam("postgres")
            except KeyError:
                self.skipTest("no postgres user to run the server as")
            as_pg = ["runuser", "-u", "postgres", "--"]
        tmp = tempfile.mkdtemp(prefix="tk-py-pg-")
        data, sock = os.path.join(tmp, "data"), os.path.join(tmp, "sock")
        os.chmod(tmp, 0o711)
        os.makedirs(sock)
        if as_pg:
            shutil.chown(tmp, "postgres")
            shutil.chown(sock, "postgres")
        port = free_ports3()
        started = False
        try:
            subprocess.run(as_pg + [f"{pgbin}/initdb", "-D", data, "-A", "trust", "-U",
                                    "postgres", "-E", "UTF8", "--locale=C", "--no-sync"],
                           check=True, capture_output=True, timeout=120)
            subprocess.run(as_pg + [f"{pgbin}/pg_ctl", "-D", data, "-l",
                                    os.path.join(tmp, "server.log"), "-w", "-t", "60", "-o",
                                    f"-k {sock} -p {port} -c listen_addresses='' -c fsync=off",
                                    "start"], check=True, capture_output=True, timeout=90)
            started = True
            env = dict(self.env, PGHOST=sock, PGPORT=str(port), PGUSER="postgres",
                       PGDATABASE="postgres", PSQL=f"{pgbin}/psql",
                       FENCING_SQL=os.path.join(REPO, "docs", "examples", "fencing_pg.sql"))
            out = self.run_example("fencing_pg.py", env)
            self.assertRegex(out, r"bob: +token \d+ after [0-9.]+ s, writes 39: applied")
            self.assertRegex(out, r"alice: writes 38 with token \d+: stale")
            # The database itself: bob's write stands, with bob's token.
            row = subprocess.run([f"{pgbin}/psql", "-X", "-tA", "-c",
                                  "SELECT remaining, last_writer LIKE 'bob-%', "
                                  "last_token = (SELECT token FROM ticketing_demo.fence "
                                  "WHERE lock_key = 'show-42') FROM ticketing_demo.inventory"],
                                 env=env, capture_output=True, text=True, check=True).stdout
            self.assertEqual(row.strip(), "39|t|t")
        finally:
            if started:
                subprocess.run(as_pg + [f"{pgbin}/pg_ctl", "-D", data, "-m", "immediate", "-w",
                                        "stop"], capture_output=True)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
