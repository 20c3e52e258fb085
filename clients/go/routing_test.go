package ticketing

// Routing by key across groups (route.go): the pure parts (reading a ring,
// the group of a slot, the seed group found by address, never an older
// ring, the resend pause and budget), then the client against fake groups
// that answer W and S as a real group does, so that every path is quick
// and exact. The conformance scenarios routing_by_slot,
// stale_ring_after_a_move and move_in_progress run it against two real
// groups and a real move.

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseRingAndGroupOf(t *testing.T) {
	r, err := parseRing(3, "0-8191=sales-a@10.0.0.1:7400,10.0.0.2:7400;8192-9999=sales-b@h:1;"+
		"10000-10000=sales-a@10.0.0.3:7400;12000-16383=sales-b@h:1,h:2")
	if err != nil {
		t.Fatal(err)
	}
	if r.version != 3 || len(r.groups) != 2 || r.groups[0].name != "sales-a" || r.groups[1].name != "sales-b" {
		t.Fatalf("groups %+v", r.groups)
	}
	// A group's addresses are those of all its ranges, once each.
	if got := strings.Join(r.groups[0].addrs, ","); got != "10.0.0.1:7400,10.0.0.2:7400,10.0.0.3:7400" {
		t.Fatalf("sales-a addresses %s", got)
	}
	if got := strings.Join(r.groups[1].addrs, ","); got != "h:1,h:2" {
		t.Fatalf("sales-b addresses %s", got)
	}
	for _, c := range []struct {
		slot uint32
		gi   int
	}{{0, 0}, {8191, 0}, {8192, 1}, {9999, 1}, {10000, 0}, {10001, -1}, {11999, -1},
		{12000, 1}, {16383, 1}, {16384, -1}} {
		if gi := r.groupOf(c.slot); gi != c.gi {
			t.Errorf("slot %d: group %d, want %d", c.slot, gi, c.gi)
		}
	}
	if gi := (*ring)(nil).groupOf(5); gi != -1 {
		t.Fatalf("no ring names group %d", gi)
	}
	empty, err := parseRing(4, "-")
	if err != nil || empty.groupOf(0) != -1 || len(empty.groups) != 0 {
		t.Fatalf("a ring with no ranges: %v %v", empty, err)
	}
	// A group name may hold '-', '=' and ',' (not ';' or '@').
	odd, err := parseRing(5, "0-16383=a-b=c,d@h:1")
	if err != nil || odd.groups[0].name != "a-b=c,d" || odd.groupOf(16383) != 0 {
		t.Fatalf("odd name: %+v %v", odd, err)
	}

	var many []string
	for i := 0; i < ringGroupsMax; i++ {
		many = append(many, fmt.Sprintf("%d-%d=g%d@h:1", i, i, i))
	}
	if _, err := parseRing(1, strings.Join(many, ";")); err != nil {
		t.Fatalf("%d groups: %v", ringGroupsMax, err)
	}
	bad := []string{
		"",                              // no range
		"0-8191",                        // no group
		"0-8191=a",                      // no addresses
		"0-8191=a@",                     // an empty address
		"0-8191=@h:1",                   // an empty group name
		"0-8191=a@h:1,",                 // an empty address after a comma
		"0-8191=a@h",                    // no port
		"8191-0=a@h:1",                  // first above last
		"0-16384=a@h:1",                 // past the last slot
		"00-5=a@h:1",                    // leading zero
		"0-5=a@h:1;5-9=b@h:2",           // overlapping ranges
		"0-5=a@h:1;;6-9=b@h:2",          // an empty range
		"0-5=a@h:1,h:2,h:3,h:4,h:5,h:6", // six addresses in a range
		"0-5=" + strings.Repeat("g", 65) + "@h:1", // a name too long
		"0-5=a;b@h:1", // ';' splits it: a range without '@'
		"0-5=a@" + strings.Repeat("h", 124) + ":7400", // an address of 129 bytes
		strings.Join(many, ";") + ";64-64=g64@h:1",    // 65 groups
	}
	for _, b := range bad {
		if r, err := parseRing(1, b); err == nil {
			t.Errorf("%q taken: %+v", b, r.groups)
		}
	}
	if _, err := parseRing(0, "-"); err == nil {
		t.Error("version 0 taken as a ring")
	}
}

// The group whose addresses include a configured one is the seed.
func TestSeedIndex(t *testing.T) {
	r, err := parseRing(1, "0-99=a@10.0.0.1:7400,10.0.0.2:7400;100-199=b@Node-B1:7400,node-b2:7400")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		configured []string
		want       int
	}{
		{[]string{"10.0.0.2:7400"}, 0},
		{[]string{"node-b1:7400", "10.0.0.9:7400"}, 1}, // host names compare without case
		{[]string{"10.0.0.1:7401"}, -1},                // another port is another node
		{[]string{"10.0.0.9:7400"}, -1},
		{[]string{"node-b2:7400", "10.0.0.1:7400"}, 0}, // both: the ring's first group
	} {
		if got := seedIndex(r, c.configured); got != c.want {
			t.Errorf("%q: seed %d, want %d", c.configured, got, c.want)
		}
	}
}

// Only a newer ring replaces the one the client has.
func TestTakeRing(t *testing.T) {
	v2, _ := parseRing(2, "-")
	for _, c := range []struct {
		cur  *ring
		ver  uint64
		take bool
	}{{nil, 1, true}, {nil, 0, false}, {v2, 3, true}, {v2, 2, false}, {v2, 1, false}, {v2, 0, false}} {
		if got := takeRing(c.cur, c.ver); got != c.take {
			t.Errorf("ring %v, fetched version %d: take %v, want %v", c.cur != nil, c.ver, got, c.take)
		}
	}
}

func TestResendArithmetic(t *testing.T) {
	var got []int64
	p := time.Duration(0)
	for i := 0; i < 7; i++ {
		p = nextPause(p)
		got = append(got, p.Milliseconds())
	}
	if fmt.Sprint(got) != "[20 40 80 160 200 200 200]" {
		t.Fatalf("pauses %v ms", got)
	}
	cfg := Config{SendBudgetMin: time.Second, RequestTimeout: 5 * time.Second}
	for _, c := range []struct {
		typ  byte
		wait uint32
		want time.Duration
	}{{'A', 0, time.Second}, {'A', 20000, 20 * time.Second}, {'A', 999, time.Second},
		{'R', 20000, 5 * time.Second}, {'Q', 0, 5 * time.Second}, {'S', 0, 5 * time.Second}} {
		if b := budgetOf(c.typ, c.wait, &cfg); b != c.want {
			t.Errorf("budget of %c wait %d: %v, want %v", c.typ, c.wait, b, c.want)
		}
	}
	ms := time.Millisecond
	for _, c := range []struct {
		wait        uint32
		submit, now time.Duration
		want        uint32
	}{{20000, 0, 0, 20000}, {20000, 10 * ms, 5 * ms, 20000}, {20000, 0, 1500*ms + 300*time.Microsecond, 18500},
		{20000, 0, 20 * time.Second, 0}, {20000, 0, 30 * time.Second, 0}, {0, 0, 5 * ms, 0}} {
		if w := waitLeftMs(c.wait, c.submit, c.now); w != c.want {
			t.Errorf("wait %d submitted %v, at %v: %d left, want %d", c.wait, c.submit, c.now, w, c.want)
		}
	}
	if at, ok := resendAt(100*ms, 20*ms, time.Second); !ok || at != 120*ms {
		t.Fatalf("resend at %v %v", at, ok)
	}
	if _, ok := resendAt(990*ms, 20*ms, time.Second); ok {
		t.Fatal("a resend past the budget's end")
	}
	if _, ok := resendAt(980*ms, 20*ms, time.Second); ok {
		t.Fatal("a resend at the budget's end")
	}
}

// keyIn is a key whose slot is in [lo, hi].
func keyIn(t *testing.T, lo, hi uint32) string {
	for i := 0; i < 100000; i++ {
		k := fmt.Sprintf("key-%d", i)
		if s := Slot(k); s >= lo && s <= hi {
			return k
		}
	}
	t.Fatalf("no key in slots %d-%d", lo, hi)
	return ""
}

// fakeGroup plays one group: it serves the slots its ring gives it (by
// name), answers W with its ring's version for the others, and S with its
// ring. Grants carry the group's own tokens.
type fakeGroup struct {
	name string
	mu   sync.Mutex
	ver  uint64
	body string
	tok  uint64
	f    *fakeServer
}

func (g *fakeGroup) setRing(ver uint64, body string) {
	g.mu.Lock()
	g.ver, g.body = ver, body
	g.mu.Unlock()
}

func (g *fakeGroup) answer(line string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := strings.Fields(line)
	if w[0] == "S" {
		return []string{fmt.Sprintf("S %s %d %s", w[1], g.ver, g.body)}
	}
	slot := Slot(w[2])
	r, err := parseRing(g.ver, g.body)
	if err != nil || r.groupOf(slot) < 0 || r.groups[r.groupOf(slot)].name != g.name {
		return []string{fmt.Sprintf("W %s %d %d", w[1], slot, g.ver)}
	}
	switch w[0] {
	case "A":
		g.tok++
		return []string{fmt.Sprintf("G %s %d", w[1], g.tok)}
	case "R":
		return []string{"R " + w[1]}
	}
	return []string{"Q " + w[1] + " - 0 0"}
}

func startGroup(t *testing.T, name string, tok uint64) (*fakeGroup, string) {
	g := &fakeGroup{name: name, tok: tok}
	f, secret := startFake(t, g.answer)
	g.f = f
	return g, secret
}

func (g *fakeGroup) addr() string { return g.f.ln.Addr().String() }

// count is how many request lines of kind (A, R, Q, S) the group saw.
func (g *fakeGroup) count(kind string) int {
	lines, _, _ := g.f.seen()
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, kind+" ") {
			n++
		}
	}
	return n
}

// A key of the other group: one W from the seed, one ring fetch there,
// then that group's own connections; later requests go straight there.
func TestRoutesByRing(t *testing.T) {
	a, secret := startGroup(t, "sales-a", 100)
	b, _ := startGroup(t, "sales-b", 5000)
	body := "0-8191=sales-a@" + a.addr() + ";8192-16383=sales-b@" + b.addr()
	a.setRing(1, body)
	b.setRing(1, body)
	c := dial(t, []string{a.addr()}, secret, nil)
	ctx := ctxT(t, 20*time.Second)
	ka, kb, kb2 := keyIn(t, 0, 8191), keyIn(t, 8192, 11999), keyIn(t, 12000, 16383)

	g, err := c.Acquire(ctx, ka, 30*time.Second, time.Second)
	if err != nil || g.Token != 101 {
		t.Fatalf("seed key: %+v %v", g, err)
	}
	if st := c.Stats(); st.RingVersion != 0 || st.Rerouted != 0 || st.Groups != 1 {
		t.Fatalf("before any W: %+v", st)
	}
	g, err = c.Acquire(ctx, kb, 30*time.Second, time.Second)
	if err != nil || g.Token != 5001 {
		t.Fatalf("other group's key: %+v %v", g, err)
	}
	st := c.Stats()
	if st.RingVersion != 1 || st.Rerouted != 1 || st.Groups != 2 || st.Indeterminate != 0 {
		t.Fatalf("after one W: %+v", st)
	}
	if _, err := c.Query(ctx, kb); err != nil {
		t.Fatal(err)
	}
	if g2, err := c.Acquire(ctx, kb2, 30*time.Second, 0); err != nil || g2.Token != 5002 {
		t.Fatalf("second key of the other group: %+v %v", g2, err)
	}
	if resent, err := c.ReleaseToken(ctx, kb, g.Token); err != nil || resent {
		t.Fatalf("release there: %v %v", resent, err)
	}
	if st := c.Stats(); st.Rerouted != 1 || st.Groups != 2 {
		t.Fatalf("routed by the ring afterwards: %+v", st)
	}
	if n := a.count("A"); n != 2 {
		t.Fatalf("the seed saw %d acquires, want 2 (its key, and the W'd one)", n)
	}
	if a.count("S") != 1 || b.count("S") != 0 || b.count("A") != 2 || b.count("Q") != 1 || b.count("R") != 1 {
		t.Fatalf("seed %d S; other %d S %d A %d Q %d R", a.count("S"), b.count("S"), b.count("A"),
			b.count("Q"), b.count("R"))
	}
	// Ring and Ping still ask the seed.
	if r, err := c.Ring(ctx); err != nil || r.Version != 1 || a.count("S") != 2 || b.count("S") != 0 {
		t.Fatalf("ring: %+v %v", r, err)
	}
}

// The group the ring names answers W again (a move in progress): the
// request goes again after 20, 40, 80... ms, each acquire waiting what is
// left of the caller's wait, and ends ErrWrongGroup at the budget's end
// with the last W's slot and version.
func TestSameGroupPausesWithinTheBudget(t *testing.T) {
	a, secret := startGroup(t, "sales-a", 100)
	// The ring gives sales-a everything, but its answers name no one: a
	// W for every key, as a source does for frozen slots.
	a.setRing(7, "0-16383=sales-a@"+a.addr())
	a.name = "nobody"
	c := dial(t, []string{a.addr()}, secret, func(c *Config) { c.SendBudgetMin = 100 * time.Millisecond })
	ctx := ctxT(t, 20*time.Second)
	key := keyIn(t, 0, 16383)
	start := time.Now()
	_, err := c.Acquire(ctx, key, 30*time.Second, 700*time.Millisecond)
	took := time.Since(start)
	var e *Error
	if !errors.As(err, &e) || e.Outcome != ErrWrongGroup || e.Slot != Slot(key) || e.RingVersion != 7 {
		t.Fatalf("want ErrWrongGroup slot %d version 7, got %v", Slot(key), err)
	}
	// Sends at about 0, 20, 60, 140, 300, 500 ms; the next (700) would be
	// at the budget's end.
	if took < 450*time.Millisecond || took > 2*time.Second {
		t.Fatalf("ended after %v", took)
	}
	lines, _, _ := a.f.seen()
	var waits []string
	for _, l := range lines {
		if w := strings.Fields(l); w[0] == "A" {
			waits = append(waits, w[5])
		}
	}
	if len(waits) < 4 || len(waits) > 7 {
		t.Fatalf("%d sends: waits %v", len(waits), waits)
	}
	prev := uint64(700)
	for _, w := range waits {
		v, _ := parseU64(w)
		if v > prev {
			t.Fatalf("waits sent %v: not what is left of 700 ms", waits)
		}
		prev = v
	}
	st := c.Stats()
	if st.Rerouted != uint64(len(waits)-1) || st.RingVersion != 7 || st.Groups != 1 {
		t.Fatalf("%d sends: %+v", len(waits), st)
	}
	if a.count("S") != len(waits) {
		t.Fatalf("%d ring fetches for %d W", a.count("S"), len(waits))
	}
	// A query's budget is RequestTimeout: sends at about 0, 20, 60 and
	// 140 ms, and the next would be at its end.
	c2 := dial(t, []string{a.addr()}, secret, func(c *Config) { c.RequestTimeout = 300 * time.Millisecond })
	start = time.Now()
	if _, err := c2.Query(ctx, key); !errors.Is(err, ErrWrongGroup) {
		t.Fatalf("query: %v", err)
	}
	if took := time.Since(start); took < 120*time.Millisecond || took > 2*time.Second {
		t.Fatalf("query ended after %v", took)
	}
}

// A group behind the client answers W with an older ring: the client
// keeps its newer ring and never goes back to the group that gave the key
// up.
func TestOlderRingNotTaken(t *testing.T) {
	a, secret := startGroup(t, "sales-a", 100)
	b, _ := startGroup(t, "sales-b", 5000)
	a.setRing(5, "0-0=sales-a@"+a.addr()+";1-16383=sales-b@"+b.addr())
	b.setRing(3, "0-16383=sales-a@"+a.addr())
	c := dial(t, []string{a.addr()}, secret, func(c *Config) { c.SendBudgetMin = 300 * time.Millisecond })
	ctx := ctxT(t, 20*time.Second)
	key := keyIn(t, 1, 16383)
	_, err := c.Acquire(ctx, key, 30*time.Second, 0)
	var e *Error
	if !errors.As(err, &e) || e.Outcome != ErrWrongGroup || e.RingVersion != 3 {
		t.Fatalf("want ErrWrongGroup with sales-b's version 3, got %v", err)
	}
	if st := c.Stats(); st.RingVersion != 5 {
		t.Fatalf("ring version %d: an older ring was taken", st.RingVersion)
	}
	if a.count("A") != 1 || b.count("A") < 2 || b.count("S") < 1 {
		t.Fatalf("sales-a saw %d acquires, sales-b %d (and %d ring fetches)", a.count("A"), b.count("A"), b.count("S"))
	}
}

// A slot no range covers: the seed judges it, and after its ring the
// outcome is ErrWrongGroup at once, not at the budget's end.
func TestNoGroupForTheSlot(t *testing.T) {
	a, secret := startGroup(t, "sales-a", 100)
	a.setRing(2, "0-8191=sales-a@"+a.addr())
	c := dial(t, []string{a.addr()}, secret, nil)
	ctx := ctxT(t, 20*time.Second)
	key := keyIn(t, 8192, 16383)
	for i := 0; i < 2; i++ { // without a ring, then with it
		start := time.Now()
		_, err := c.Acquire(ctx, key, 30*time.Second, 5*time.Second)
		var e *Error
		if !errors.As(err, &e) || e.Outcome != ErrWrongGroup || e.Slot != Slot(key) || e.RingVersion != 2 {
			t.Fatalf("try %d: %v", i, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("try %d: WRONG_GROUP after %v, not at once", i, took)
		}
	}
	if st := c.Stats(); st.Rerouted != 0 || st.RingVersion != 2 || a.count("A") != 2 {
		t.Fatalf("%+v, %d acquires", st, a.count("A"))
	}
}

// A release answered W goes to the group that owns the key now, within
// its 5 s, and is not "resent": the W'd write released nothing.
func TestReleaseFollowsTheRing(t *testing.T) {
	a, secret := startGroup(t, "sales-a", 100)
	b, _ := startGroup(t, "sales-b", 5000)
	body := "0-16383=sales-b@" + b.addr()
	a.setRing(4, body)
	b.setRing(4, body)
	c := dial(t, []string{a.addr()}, secret, nil)
	ctx := ctxT(t, 20*time.Second)
	resent, err := c.ReleaseToken(ctx, "show-42", 9)
	if err != nil || resent {
		t.Fatalf("release: %v resent=%v", err, resent)
	}
	if a.count("R") != 1 || b.count("R") != 1 || c.Stats().ReleasesQueued != 0 || c.Stats().Rerouted != 1 {
		t.Fatalf("releases: seed %d, sales-b %d; %+v", a.count("R"), b.count("R"), c.Stats())
	}
}

// A newer ring that gives a group's slots to another: the client follows
// it, and the connections of the group the ring no longer names close once
// nothing waits on them.
func TestGroupLeavesTheRing(t *testing.T) {
	a, secret := startGroup(t, "sales-a", 100)
	b, _ := startGroup(t, "sales-b", 5000)
	d, _ := startGroup(t, "sales-d", 9000)
	v1 := "0-8191=sales-a@" + a.addr() + ";8192-16383=sales-b@" + b.addr()
	a.setRing(1, v1)
	b.setRing(1, v1)
	c := dial(t, []string{a.addr()}, secret, nil)
	ctx := ctxT(t, 20*time.Second)
	key := keyIn(t, 8192, 16383)
	if g, err := c.Acquire(ctx, key, 30*time.Second, 0); err != nil || g.Token != 5001 {
		t.Fatalf("by ring 1: %+v %v", g, err)
	}
	v2 := "0-8191=sales-a@" + a.addr() + ";8192-16383=sales-d@" + d.addr()
	for _, g := range []*fakeGroup{a, b, d} {
		g.setRing(2, v2)
	}
	if g, err := c.Acquire(ctx, key, 30*time.Second, 0); err != nil || g.Token != 9001 {
		t.Fatalf("by ring 2: %+v %v", g, err)
	}
	st := c.Stats()
	if st.RingVersion != 2 || st.Rerouted != 2 || st.Groups != 2 {
		t.Fatalf("after the second ring: %+v", st)
	}
	waitFor(t, 5*time.Second, func() bool { _, conns, eofs := b.f.seen(); return conns > 0 && eofs == conns })
	if b.count("A") != 2 || b.count("S") != 1 || d.count("A") != 1 {
		t.Fatalf("sales-b %d A %d S, sales-d %d A", b.count("A"), b.count("S"), d.count("A"))
	}
}
