package ticketing

// Real ticketingd processes for the tests: a standalone node or a cluster
// of three on 127.0.0.1. The binary comes from TICKETING_BIN, else
// TICKETING_BUILD_DIR/ticketingd, else build/ticketingd at the top of the
// repository.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func ticketingd(t testing.TB) string {
	bin := os.Getenv("TICKETING_BIN")
	if bin == "" && os.Getenv("TICKETING_BUILD_DIR") != "" {
		bin = filepath.Join(os.Getenv("TICKETING_BUILD_DIR"), "ticketingd")
	}
	if bin == "" {
		bin, _ = filepath.Abs("../../build/ticketingd")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no ticketingd (set TICKETING_BIN): %v", err)
	}
	return bin
}

func writeSecret(t testing.TB, dir, name string) string {
	var b [32]byte
	rand.Read(b[:])
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(hex.EncodeToString(b[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func portFree(p int) bool {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// freePorts3 returns P with P, P+1 and P+2 free, below the ephemeral range.
// portLocks keeps the lock files of the port blocks this test process took.
var portLocks []*os.File

// lockBlock locks the 4-port block at p (p % 4 == 0) for the rest of this
// process, as every Ticketing test harness does in the same directory, so
// tests running at once never pick the same ports. False if another
// process holds it.
func lockBlock(p int) bool {
	dir := "/tmp/ticketing-test-ports"
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(p)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return true
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		f.Close()
		return false
	}
	portLocks = append(portLocks, f)
	return true
}

func freePorts3(t testing.TB, avoid []int) int {
	for i := 0; i < 200; i++ {
		n, _ := rand.Int(rand.Reader, big.NewInt(12000))
		p := (20000 + int(n.Int64())) &^ 3
		clash := false
		for _, a := range avoid {
			clash = clash || (p+3 > a && a+3 > p)
		}
		if !clash && portFree(p) && portFree(p+1) && portFree(p+2) && lockBlock(p) {
			return p
		}
	}
	t.Fatal("no free ports")
	return 0
}

type node struct {
	port int
	cmd  *exec.Cmd
	log  string
	args []string
}

func (n *node) addr() string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

func (n *node) status() string {
	cl := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/status", n.port+2))
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func (n *node) serving() bool { return strings.Contains(n.status(), `"serving":true`) }

func (n *node) alive() bool { return n.cmd != nil && n.cmd.ProcessState == nil }

func (n *node) kill() {
	if n.cmd == nil {
		return
	}
	n.cmd.Process.Signal(syscall.SIGKILL)
	n.cmd.Wait()
	n.cmd = nil
}

func (n *node) stop() {
	if n.cmd == nil {
		return
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		n.cmd.Process.Kill()
		<-done
	}
	n.cmd = nil
}

func spawn(t testing.TB, dir string, n *node) {
	f, err := os.Create(n.log)
	if err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command(ticketingd(t), n.args...)
	n.cmd.Stdout, n.cmd.Stderr = f, f
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func dumpLog(t testing.TB, n *node) {
	b, _ := os.ReadFile(n.log)
	s := string(b)
	if len(s) > 3000 {
		s = s[len(s)-3000:]
	}
	t.Logf("---- %s log ----\n%s", n.addr(), s)
}

// standalone starts one node with its client secret; returns it and the
// secret file.
func standalone(t testing.TB) (*node, string) { return standaloneWith(t) }

// standaloneWith is standalone with more ticketingd arguments (for
// example "--group", "sales-b").
func standaloneWith(t testing.TB, extra ...string) (*node, string) {
	dir := t.TempDir()
	secret := writeSecret(t, dir, "client.secret")
	for attempt := 0; attempt < 5; attempt++ {
		p := freePorts3(t, nil)
		n := &node{port: p, log: filepath.Join(dir, fmt.Sprintf("node-%d.log", attempt)),
			args: append([]string{"--bind", "127.0.0.1", "--port", fmt.Sprint(p), "--threads", "1",
				"--client-secret-file", secret}, extra...)}
		spawn(t, dir, n)
		exited := make(chan struct{})
		go func(cmd *exec.Cmd) { cmd.Wait(); close(exited) }(n.cmd)
		for i := 0; i < 100; i++ {
			select {
			case <-exited:
				i = 100
				continue
			default:
			}
			if n.serving() {
				cmd := n.cmd
				t.Cleanup(func() {
					cmd.Process.Signal(syscall.SIGTERM)
					select {
					case <-exited:
					case <-time.After(5 * time.Second):
						cmd.Process.Kill()
						<-exited
					}
					if t.Failed() {
						dumpLog(t, n)
					}
				})
				n.cmd = nil // owned by the cleanup above
				return n, secret
			}
			time.Sleep(50 * time.Millisecond)
		}
		n.cmd.Process.Kill()
		<-exited
		dumpLog(t, n)
	}
	t.Fatal("ticketingd did not start")
	return nil, ""
}

type cluster struct {
	nodes  []*node
	secret string
}

func (c *cluster) addrs() []string {
	var a []string
	for _, n := range c.nodes {
		a = append(a, n.addr())
	}
	return a
}

// leader waits until a node serves; -1 if none within timeout.
func (c *cluster) leader(timeout time.Duration) int {
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		for i, n := range c.nodes {
			if n.cmd != nil && n.serving() {
				return i
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1
}

func startCluster(t testing.TB) *cluster {
	dir := t.TempDir()
	c := &cluster{secret: writeSecret(t, dir, "client.secret")}
	peer := writeSecret(t, dir, "peer.secret")
	var ports, peers []string
	var used []int
	for i := 0; i < 3; i++ {
		p := freePorts3(t, used)
		used = append(used, p)
		ports = append(ports, fmt.Sprint(p))
		peers = append(peers, fmt.Sprintf("127.0.0.1:%d", p+1))
	}
	for i := 0; i < 3; i++ {
		n := &node{port: used[i], log: filepath.Join(dir, fmt.Sprintf("node%d.log", i)),
			args: []string{"--bind", "127.0.0.1", "--port", ports[i],
				"--advertise", "127.0.0.1:" + ports[i], "--peers", strings.Join(peers, ","),
				"--threads", "1", "--client-secret-file", c.secret, "--peer-secret-file", peer}}
		spawn(t, dir, n)
		c.nodes = append(c.nodes, n)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop()
		}
		if t.Failed() {
			for _, n := range c.nodes {
				dumpLog(t, n)
			}
		}
	})
	if c.leader(20*time.Second) < 0 {
		t.Fatal("no leader within 20 s")
	}
	return c
}

func dial(t testing.TB, addrs []string, secret string, mod func(*Config)) *Client {
	cfg := Config{Addrs: addrs, SecretFile: secret}
	if mod != nil {
		mod(&cfg)
	}
	c, err := Dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
