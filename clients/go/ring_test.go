package ticketing

// SPEC 15's answers: W (wrong group) and S (the ring, one line or parts),
// parsed strictly, put together, and the outcomes they give.

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseWrongGroup(t *testing.T) {
	good := []struct {
		line    string
		id      uint64
		slot    uint32
		version uint64
	}{
		{"W 8 11909 3", 8, 11909, 3},
		{"W 1 0 0", 1, 0, 0},
		{"W 18446744073709551615 16383 18446744073709551615", 1<<64 - 1, 16383, 1<<64 - 1},
		{"W 2 5 7\r", 2, 5, 7},
	}
	for _, g := range good {
		r, ok := parseResponse(g.line)
		if !ok || r.typ != 'W' || !r.hasID || r.id != g.id || r.slot != g.slot || r.version != g.version {
			t.Errorf("%q: got %+v ok=%v", g.line, r, ok)
		}
	}
	bad := []string{
		"W 8 11909",                      // no version
		"W 8 11909 3 4",                  // one field too many
		"W 8 16384 3",                    // slot past 16383
		"W 8 011909 3",                   // leading zero
		"W 8 11909 03",                   // leading zero
		"W 8 -1 3",                       // sign
		"W 8 11909 18446744073709551616", // past the u64 range
		"W - 11909 3",                    // no id
		"W 8  11909 3",                   // empty field
		"W 8 11909 3 ",                   // trailing space
		"W 8 1a 3",                       // not a number
	}
	for _, b := range bad {
		if r, ok := parseResponse(b); ok {
			t.Errorf("%q accepted: %+v", b, r)
		}
	}
}

func TestParseRing(t *testing.T) {
	good := []struct {
		line        string
		version     uint64
		part, parts uint32
		body        string
	}{
		{"S 7 0 -", 0, 1, 1, "-"},
		{"S 7 3 0-8191=sales-a@10.0.0.1:7400,10.0.0.2:7400;8192-16383=sales-b@10.0.1.1:7400", 3, 1, 1,
			"0-8191=sales-a@10.0.0.1:7400,10.0.0.2:7400;8192-16383=sales-b@10.0.1.1:7400"},
		{"S 7 3 -", 3, 1, 1, "-"}, // a ring with no ranges
		{"S 7 4 1/3 0-9=a@h:1", 4, 1, 3, "0-9=a@h:1"},
		{"S 7 4 3/3 20-29=c@h:3", 4, 3, 3, "20-29=c@h:3"},
		{"S 7 4 1024/1024 x", 4, 1024, 1024, "x"},
	}
	for _, g := range good {
		r, ok := parseResponse(g.line)
		if !ok || r.typ != 'S' || r.id != 7 || r.version != g.version || r.part != g.part ||
			r.parts != g.parts || r.text != g.body {
			t.Errorf("%q: got %+v ok=%v", g.line, r, ok)
		}
	}
	bad := []string{
		"S 7",               // a request, not an answer
		"S 7 3",             // no body
		"S 7 0 0-9=a@h:1",   // version 0 (no ring) with ranges
		"S 7 03 -",          // leading zero
		"S 7 3 1/3 a b",     // too many fields
		"S 7 3 0/3 x",       // k = 0
		"S 7 3 4/3 x",       // k > n
		"S 7 3 1/1 x",       // a part form needs n >= 2
		"S 7 3 1/1025 x",    // more parts than a ring has ranges
		"S 7 3 1/03 x",      // leading zero
		"S 7 3 1-3 x",       // no slash
		"S 7 3 1/3/3 x",     // two slashes
		"S 7 3 /3 x",        // empty k
		"S 7 0 1/2 x",       // parts of no ring
		"S 7 3 1/2 -",       // a part with no ranges
		"S 7 3 \x01x",       // not visible ASCII
		"S 7 3 caf\xc3\xa9", // not ASCII
		"S - 3 -",           // no id
		"S 7 3  -",          // empty field
	}
	for _, b := range bad {
		if r, ok := parseResponse(b); ok {
			t.Errorf("%q accepted: %+v", b, r)
		}
	}
}

// ringPart puts parts together in order and refuses anything else.
func TestRingPartsInOrder(t *testing.T) {
	part := func(line string) *response {
		r, ok := parseResponse(line)
		if !ok {
			t.Fatalf("%q does not parse", line)
		}
		return &r
	}
	r := &req{typ: 'S'}
	for i, line := range []string{"S 7 5 1/3 0-9=a@h:1", "S 7 5 2/3 10-19=b@h:2"} {
		if _, done, ok := ringPart(r, part(line)); done || !ok {
			t.Fatalf("part %d: done=%v ok=%v", i+1, done, ok)
		}
	}
	whole, done, ok := ringPart(r, part("S 7 5 3/3 20-16383=c@h:3,h:4"))
	if !done || !ok || whole.version != 5 || whole.text != "0-9=a@h:1;10-19=b@h:2;20-16383=c@h:3,h:4" {
		t.Fatalf("joined: %+v done=%v ok=%v", whole, done, ok)
	}
	whole, done, ok = ringPart(r, part("S 8 6 0-16383=a@h:1")) // then a one-line answer
	if !done || !ok || whole.text != "0-16383=a@h:1" || whole.version != 6 {
		t.Fatalf("one line after parts: %+v done=%v ok=%v", whole, done, ok)
	}
	for _, seq := range [][]string{
		{"S 7 5 2/3 x"},                        // does not start at 1
		{"S 7 5 1/3 x", "S 7 5 3/3 y"},         // skips a part
		{"S 7 5 1/3 x", "S 7 5 1/3 y"},         // repeats a part
		{"S 7 5 1/3 x", "S 7 5 2/4 y"},         // n changes
		{"S 7 5 1/3 x", "S 7 6 2/3 y"},         // the version changes
		{"S 7 5 1/3 x", "S 7 5 0-16383=a@h:1"}, // a one-line answer among parts
	} {
		r := &req{typ: 'S'}
		for i, line := range seq {
			_, _, ok := ringPart(r, part(line))
			if last := i == len(seq)-1; ok == last {
				t.Errorf("%q: line %d ok=%v", seq, i+1, ok)
			}
		}
	}
}

// fakeServer speaks the handshake with the right proof, answers the probe,
// and answers every other line with what answer gives (several lines
// allowed). It records the request lines and counts connections.
type fakeServer struct {
	ln     net.Listener
	secret []byte
	answer func(line string) []string
	mu     sync.Mutex
	lines  []string
	conns  int
	eofs   int // connections the client closed
}

func startFake(t *testing.T, answer func(line string) []string) (*fakeServer, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{ln: ln, secret: []byte("fake-server-secret-0123456789"), answer: answer}
	path := filepath.Join(t.TempDir(), "client.secret")
	if err := os.WriteFile(path, f.secret, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(nc)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return f, path
}

func (f *fakeServer) serve(nc net.Conn) {
	defer nc.Close()
	f.mu.Lock()
	f.conns++
	f.mu.Unlock()
	var nb [32]byte
	rand.Read(nb[:])
	snonce := hex.EncodeToString(nb[:])
	fmt.Fprintf(nc, "TICKETING/1 %s\n", snonce)
	br := bufio.NewReader(nc)
	auth, err := br.ReadString('\n')
	w := strings.Fields(auth)
	if err != nil || len(w) != 3 || w[0] != "AUTH" || w[2] != proof(f.secret, "client", snonce, w[1]) {
		return
	}
	fmt.Fprintf(nc, "OK %s 0123456789abcdef %s\n", proof(f.secret, "server", snonce, w[1]), strings.Repeat("0", 32))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			f.mu.Lock()
			f.eofs++
			f.mu.Unlock()
			return
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "P 0" {
			fmt.Fprint(nc, "P 0\n")
			continue
		}
		f.mu.Lock()
		f.lines = append(f.lines, line)
		f.mu.Unlock()
		var out strings.Builder
		for _, a := range f.answer(line) {
			out.WriteString(a + "\n")
		}
		nc.Write([]byte(out.String()))
	}
}

func (f *fakeServer) seen() (lines []string, conns, eofs int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.lines...), f.conns, f.eofs
}

// idOf is the id of a request line ("S 3" -> "3").
func idOf(line string) string { return strings.Fields(line)[1] }

// A ring too long for one line comes in parts: Ring returns them joined,
// and the one-line form as it is.
func TestRingAnswers(t *testing.T) {
	calls := 0
	f, secret := startFake(t, func(line string) []string {
		id := idOf(line)
		if line[0] != 'S' {
			return []string{"E " + id + " command"}
		}
		calls++
		if calls == 1 {
			return []string{"S " + id + " 9 1/3 0-99=a@h:1", "S " + id + " 9 2/3 100-199=b@h:2",
				"S " + id + " 9 3/3 200-16383=c@h:3,h:4"}
		}
		return []string{"S " + id + " 10 0-16383=a@h:1"}
	})
	c := dial(t, []string{f.ln.Addr().String()}, secret, nil)
	ctx := ctxT(t, 20*time.Second)
	r, err := c.Ring(ctx)
	if err != nil || r.Version != 9 || r.Body != "0-99=a@h:1;100-199=b@h:2;200-16383=c@h:3,h:4" {
		t.Fatalf("ring in 3 parts: %+v %v", r, err)
	}
	if got := r.Ranges(); len(got) != 3 || got[2] != "200-16383=c@h:3,h:4" {
		t.Fatalf("ranges %q", got)
	}
	r, err = c.Ring(ctx)
	if err != nil || r.Version != 10 || r.Body != "0-16383=a@h:1" {
		t.Fatalf("one-line ring: %+v %v", r, err)
	}
	if n := len((RingResult{Version: 0, Body: "-"}).Ranges()); n != 0 {
		t.Fatalf("%d ranges in \"-\"", n)
	}
	if lines, _, _ := f.seen(); len(lines) != 2 || calls != 2 {
		t.Fatalf("requests %q", lines)
	}
}

// A part out of order is a protocol error: the connection is dropped (the
// client closes it), the ring is never returned from the broken answer.
func TestRingPartOutOfOrderDropsTheConnection(t *testing.T) {
	f, secret := startFake(t, func(line string) []string {
		id := idOf(line)
		return []string{"S " + id + " 9 1/3 0-99=a@h:1", "S " + id + " 9 3/3 200-16383=c@h:3"}
	})
	c := dial(t, []string{f.ln.Addr().String()}, secret, func(c *Config) {
		c.RequestTimeout = 800 * time.Millisecond
		c.BackoffMin, c.BackoffMax = 20*time.Millisecond, 50*time.Millisecond
	})
	r, err := c.Ring(ctxT(t, 10*time.Second))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("want ErrUnavailable, got %+v %v", r, err)
	}
	if le := c.LastError(); !strings.Contains(le, "ring part 3/3 out of order") {
		t.Fatalf("last error %q", le)
	}
	waitFor(t, 5*time.Second, func() bool { _, _, eofs := f.seen(); return eofs >= 1 })
	// A read is safe to repeat: the ring request went out again on the
	// next connection.
	if lines, conns, _ := f.seen(); len(lines) < 2 || conns < 2 {
		t.Fatalf("ring sent %d times on %d connections", len(lines), conns)
	}
}

// W is definite for acquire, query and release. With no ring to route by
// (the group that answered has none either), each ends ErrWrongGroup at
// once, with the W's slot and ring version, after one ring fetch; a
// release answered W leaves the queue and is written once only.
func TestWrongGroupFake(t *testing.T) {
	f, secret := startFake(t, func(line string) []string {
		w := strings.Fields(line)
		if w[0] == "S" {
			return []string{"S " + w[1] + " 0 -"}
		}
		return []string{fmt.Sprintf("W %s %d 4", w[1], Slot(w[2]))}
	})
	c := dial(t, []string{f.ln.Addr().String()}, secret, nil)
	ctx := ctxT(t, 20*time.Second)
	check := func(what string, err error, key string) {
		t.Helper()
		var e *Error
		if !errors.Is(err, ErrWrongGroup) || !errors.As(err, &e) || e.Slot != Slot(key) || e.RingVersion != 4 {
			t.Fatalf("%s: want ErrWrongGroup slot %d version 4, got %v", what, Slot(key), err)
		}
		if OutcomeName(what, err) != "WRONG_GROUP" {
			t.Fatalf("%s: outcome name %s", what, OutcomeName(what, err))
		}
	}
	_, err := c.Acquire(ctx, "show-42", 30*time.Second, time.Second)
	check("acquire", err, "show-42")
	_, err = c.Query(ctx, "a")
	check("query", err, "a")
	resent, err := c.ReleaseToken(ctx, "show-42:seat-17", 7)
	check("release", err, "show-42:seat-17")
	if resent {
		t.Fatal("release answered W reported resent")
	}
	if st := c.Stats(); st.ReleasesQueued != 0 || st.RequestsInProgress != 0 {
		t.Fatalf("after W: %d releases queued, %d requests in progress", st.ReleasesQueued, st.RequestsInProgress)
	}
	time.Sleep(300 * time.Millisecond) // a release kept in the queue would go out again
	lines, _, _ := f.seen()
	releases, fetches := 0, 0
	for _, l := range lines {
		if strings.HasPrefix(l, "R ") {
			releases++
		}
		if strings.HasPrefix(l, "S ") {
			fetches++
		}
	}
	if releases != 1 || fetches != 3 || c.Stats().RequestsWritten != 6 {
		t.Fatalf("release written %d times, %d ring fetches, %d requests written: %q",
			releases, fetches, c.Stats().RequestsWritten, lines)
	}
	if st := c.Stats(); st.RingVersion != 0 || st.Rerouted != 0 || st.Groups != 1 {
		t.Fatalf("no ring: ring version %d, rerouted %d, groups %d", st.RingVersion, st.Rerouted, st.Groups)
	}
}

// A real node of a named group with no ring answers W to every key, and S
// with no ring; the connection stays usable.
func TestWrongGroupServer(t *testing.T) {
	n, secret := standaloneWith(t, "--group", "sales-b")
	c := dial(t, []string{n.addr()}, secret, nil)
	ctx := ctxT(t, 30*time.Second)
	var e *Error
	if _, err := c.Acquire(ctx, "show-42", 30*time.Second, time.Second); !errors.As(err, &e) ||
		e.Outcome != ErrWrongGroup || e.Slot != 11909 || e.RingVersion != 0 {
		t.Fatalf("acquire: %v", err)
	}
	if _, err := c.Query(ctx, "a"); !errors.As(err, &e) || e.Outcome != ErrWrongGroup || e.Slot != 11404 {
		t.Fatalf("query: %v", err)
	}
	if _, err := c.ReleaseToken(ctx, "show-42:seat-17", 1); !errors.As(err, &e) ||
		e.Outcome != ErrWrongGroup || e.Slot != 10735 {
		t.Fatalf("release: %v", err)
	}
	if c.Stats().ReleasesQueued != 0 {
		t.Fatal("a release answered W stayed queued")
	}
	if r, err := c.Ring(ctx); err != nil || r.Version != 0 || r.Body != "-" {
		t.Fatalf("ring: %+v %v", r, err)
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	// And a node of the default group answers S with no ring, and serves.
	d, secret2 := standalone(t)
	c2 := dial(t, []string{d.addr()}, secret2, nil)
	if r, err := c2.Ring(ctx); err != nil || r.Version != 0 || r.Body != "-" {
		t.Fatalf("ring of a default group: %+v %v", r, err)
	}
}
