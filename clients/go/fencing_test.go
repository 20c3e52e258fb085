package ticketing

// The fencing example (examples/fencing_pg) against a private PostgreSQL
// (initdb in a temporary directory, unix socket only) and a standalone
// ticketingd; the database is then checked directly. Skipped only when no
// PostgreSQL server binaries (or, as root, no postgres user) exist.

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestExampleFencingPostgres(t *testing.T) {
	var pgbin string
	for _, d := range append([]string{os.Getenv("PGBIN")}, globDirs("/usr/lib/postgresql/*/bin")...) {
		if d != "" && isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			pgbin = d
		}
	}
	if pgbin == "" {
		t.Skip("PostgreSQL server binaries not found (apt-get install postgresql)")
	}
	var asPG []string
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			t.Skip("no postgres user to run the server as")
		}
		asPG = []string{"runuser", "-u", "postgres", "--"}
	}
	tmp, err := os.MkdirTemp("", "tk-go-pg.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	os.Chmod(tmp, 0o711)
	data, sock := filepath.Join(tmp, "data"), filepath.Join(tmp, "sock")
	os.Mkdir(sock, 0o755)
	os.Mkdir(data, 0o700)
	if asPG != nil {
		exec.Command("chown", "postgres:", data, sock).Run()
	}
	pg := func(args ...string) error {
		full := append(append([]string{}, asPG...), args...)
		out, err := exec.Command(full[0], full[1:]...).CombinedOutput()
		if err != nil {
			t.Logf("%v: %s", args, out)
		}
		return err
	}
	if err := pg(filepath.Join(pgbin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres",
		"-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		t.Fatal("initdb failed")
	}
	port := freePorts3(t, nil)
	if err := pg(filepath.Join(pgbin, "pg_ctl"), "-D", data, "-l", filepath.Join(sock, "pg.log"), "-w",
		"-t", "60", "-o", fmt.Sprintf("-k %s -p %d -c listen_addresses='' -c fsync=off", sock, port),
		"start"); err != nil {
		t.Fatal("PostgreSQL did not start")
	}
	t.Cleanup(func() { pg(filepath.Join(pgbin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop") })

	n, secret := standalone(t)
	env := append(os.Environ(), "TICKETING_ADDR="+n.addr(), "TICKETING_SECRET_FILE="+secret,
		"PGHOST="+sock, fmt.Sprintf("PGPORT=%d", port), "PGUSER=postgres", "PGDATABASE=postgres",
		"PSQL="+filepath.Join(pgbin, "psql"))
	bin := build(t, "./examples/fencing_pg")
	cmd := exec.Command(bin)
	cmd.Dir = "../.." // the top of the repository: docs/examples/fencing_pg.sql
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	t.Logf("example:\n%s", out)
	if err != nil {
		t.Fatalf("the example failed: %v", err)
	}
	m := regexp.MustCompile(`summary: alice_token=(\d+) bob_token=(\d+) bob_write=applied alice_write=stale`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatal("no summary with bob applied and alice stale")
	}
	q := exec.Command(filepath.Join(pgbin, "psql"), "-X", "-tA", "-F", "|", "-c",
		"SELECT remaining, split_part(last_writer, '-', 1), last_token, (SELECT token FROM ticketing_demo.fence WHERE lock_key = 'show-42') FROM ticketing_demo.inventory WHERE item = 'show-42'")
	q.Env = env
	row, err := q.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(row)), "39|bob|"+m[2]+"|"+m[2]; got != want {
		t.Fatalf("database row %q, want %q (the stale write landed?)", got, want)
	}
}

func globDirs(p string) []string { m, _ := filepath.Glob(p); return m }

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode()&0o111 != 0
}
