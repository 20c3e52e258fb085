package ticketing

// The programs of this module, built and run as a user would: the examples
// of docs/client.md ("Go") and the conformance driver.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func build(t *testing.T, pkg string) string {
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

func TestExampleFirstLock(t *testing.T) {
	n, secret := standalone(t)
	bin := build(t, "./examples/first_lock")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "TICKETING_ADDR="+n.addr(), "TICKETING_SECRET_FILE="+secret)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "holding inventory/sku-1 with token ") {
		t.Fatalf("first_lock: %v\n%s", err, out)
	}
	// It released: the key is free.
	c := dial(t, []string{n.addr()}, secret, nil)
	q, err := c.Query(ctxT(t, 10*time.Second), "inventory/sku-1")
	if err != nil || q.Held {
		t.Fatalf("after the example: %+v %v", q, err)
	}
}

// A session of the conformance driver: each command gets one reply line in
// order, with the outcome names of the C library.
func TestDriverSession(t *testing.T) {
	n, secret := standalone(t)
	bin := build(t, "./cmd/ticketing-driver")
	cmd := exec.Command(bin, "--addrs", n.addr(), "--secret-file", secret, "--owner", "drv-1",
		"--response-grace-ms", "1500")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	rd := bufio.NewReader(stdout)
	call := func(line string) map[string]interface{} {
		t.Helper()
		io.WriteString(stdin, line+"\n")
		got, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: no reply: %v", line, err)
		}
		var m map[string]interface{}
		d := json.NewDecoder(strings.NewReader(got))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			t.Fatalf("%s: reply %q: %v", line, got, err)
		}
		if _, ok := m["elapsed_ms"]; !ok {
			t.Fatalf("%s: no elapsed_ms in %s", line, got)
		}
		return m
	}
	expect := func(m map[string]interface{}, k string, want interface{}) {
		t.Helper()
		if fmt.Sprint(m[k]) != fmt.Sprint(want) {
			t.Fatalf("%s = %v, want %v (reply %v)", k, m[k], want, m)
		}
	}
	m := call(`{"op":"ping"}`)
	expect(m, "outcome", "ANSWERED")
	m = call(`{"op":"acquire","key":"k1","lease_ms":30000,"wait_ms":0}`)
	expect(m, "outcome", "ACQUIRED")
	tok := m["token"].(json.Number).String()
	m = call(`{"op":"acquire","key":"k1","lease_ms":30000,"wait_ms":0}`)
	expect(m, "outcome", "BUSY")
	expect(m, "token", 0)
	m = call(`{"op":"query","key":"k1"}`)
	expect(m, "outcome", "ANSWERED")
	expect(m, "held", true)
	expect(m, "owner", "drv-1")
	expect(m, "token", tok)
	m = call(`{"op":"acquire","key":"bad key","lease_ms":30000,"wait_ms":0}`)
	expect(m, "outcome", "INVALID")
	m = call(`{"op":"release","key":"k1","token":` + tok + `}`)
	expect(m, "outcome", "RELEASED")
	expect(m, "resent", false)
	m = call(`{"op":"release","key":"k1","token":` + tok + `}`)
	expect(m, "outcome", "NOT_HELD")
	m = call(`{"op":"query","key":"k1"}`)
	expect(m, "held", false)
	expect(m, "owner", "<nil>")
	m = call(`{"op":"acquire","key":"k1"`)
	expect(m, "outcome", "DRIVER_ERROR")
	m = call(`{"op":"sleep","ms":10}`)
	expect(m, "outcome", "OK")
	m = call(`{"op":"ring"}`)
	expect(m, "outcome", "ANSWERED")
	expect(m, "version", 0)
	expect(m, "body", "-")
	m = call(`{"op":"stats"}`)
	expect(m, "outcome", "OK")
	expect(m, "compensations", 0)
	expect(m, "indeterminate", 0)
	expect(m, "releases_queued", 0)
	m = call(`{"op":"close"}`)
	expect(m, "outcome", "OK")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("driver exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the driver did not exit after close")
	}
}
