package ticketing

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TLS: a node with --tls-cert/--tls-key/--tls-client-auth; the client
// verifies it against the CA and presents its certificate. A client
// trusting another CA is refused in TLS, sends nothing (ErrUnavailable
// "tls") and names the CA file.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("sh", "../../tests/support/make_certs.sh", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot make test certificates (openssl?): %v %s", err, out)
	}
	secret := writeSecret(t, dir, "client.secret")
	p := freePorts3(t, nil)
	n := &node{port: p, log: filepath.Join(dir, "node.log"),
		args: []string{"--bind", "127.0.0.1", "--port", fmt.Sprint(p), "--threads", "1",
			"--client-secret-file", secret, "--tls-cert", filepath.Join(dir, "node.pem"),
			"--tls-key", filepath.Join(dir, "node.key"), "--tls-ca", filepath.Join(dir, "ca.pem"),
			"--tls-client-auth"}}
	spawn(t, dir, n)
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			dumpLog(t, n)
		}
	})
	waitFor(t, 10*time.Second, n.serving)
	ctx := ctxT(t, 30*time.Second)
	c := dial(t, []string{n.addr()}, secret, func(cfg *Config) {
		cfg.TLSCAFile = filepath.Join(dir, "ca.pem")
		cfg.TLSCertFile = filepath.Join(dir, "client.pem")
		cfg.TLSKeyFile = filepath.Join(dir, "client.key")
	})
	g, err := c.Acquire(ctx, "tls-key", 10*time.Second, 0)
	if err != nil {
		t.Fatalf("acquire over TLS: %v", err)
	}
	if err := c.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	bad := dial(t, []string{n.addr()}, secret, func(cfg *Config) {
		cfg.TLSCAFile = filepath.Join(dir, "other-ca.pem")
		cfg.TLSCertFile = filepath.Join(dir, "client.pem")
		cfg.TLSKeyFile = filepath.Join(dir, "client.key")
	})
	_, err = bad.Acquire(ctx, "tls-key", 10*time.Second, 0)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrUnavailable) || e.Reason != "tls" ||
		!strings.Contains(err.Error(), "other-ca.pem") {
		t.Fatalf("want ErrUnavailable (tls) naming the CA file, got %v", err)
	}
	if bad.Stats().RequestsWritten != 0 {
		t.Fatal("a request was written over a refused connection")
	}
	if _, err := Dial(Config{Addrs: []string{n.addr()}, SecretFile: secret, TLSServerName: "x"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("TLS fields without a CA file must be refused, got %v", err)
	}
}
