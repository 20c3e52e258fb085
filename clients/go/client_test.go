package ticketing

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every answer a standalone node gives: G, B, T, R, N, Q (held and free),
// P, and E <id> key for a key the server refuses (sent past the client's
// own check, which would refuse it first).
func TestOutcomesStandalone(t *testing.T) {
	n, secret := standalone(t)
	a := dial(t, []string{n.addr()}, secret, func(c *Config) { c.Owner = "alice-go" })
	b := dial(t, []string{n.addr()}, secret, nil)
	ctx := ctxT(t, 60*time.Second)

	if _, err := a.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	before := time.Now()
	g, err := a.Acquire(ctx, "show-42", 30*time.Second, 5*time.Second)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if g.Token == 0 || g.Key != "show-42" {
		t.Fatalf("grant %+v", g)
	}
	// Counted from the first write: after the call began, before it ended.
	if g.LeaseDeadline.Before(before.Add(30*time.Second)) || g.LeaseDeadline.After(time.Now().Add(30*time.Second)) {
		t.Fatalf("lease deadline %v outside [call start, call end] + lease", g.LeaseDeadline)
	}
	q, err := b.Query(ctx, "show-42")
	if err != nil || !q.Held || q.Owner != "alice-go" || q.Token != g.Token || q.Waiters != 0 {
		t.Fatalf("query held: %+v %v", q, err)
	}
	if _, err := b.Acquire(ctx, "show-42", 30*time.Second, 0); !errors.Is(err, ErrBusy) {
		t.Fatalf("acquire of a held key with wait 0: want ErrBusy, got %v", err)
	}
	if _, err := b.Acquire(ctx, "show-42", 30*time.Second, time.Second); !errors.Is(err, ErrTimeout) {
		t.Fatalf("acquire of a held key with wait 1 s: want ErrTimeout, got %v", err)
	}
	if err := b.Release(ctx, g); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release by another owner: want ErrNotHeld, got %v", err)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := a.Release(ctx, g); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second release: want ErrNotHeld, got %v", err)
	}
	q, err = b.Query(ctx, "show-42")
	if err != nil || q.Held || q.Token != 0 || q.Owner != "" {
		t.Fatalf("query free: %+v %v", q, err)
	}
	g2, err := b.Acquire(ctx, "show-42", 30*time.Second, 0)
	if err != nil || g2.Token <= g.Token {
		t.Fatalf("second grant %+v (first %d): %v", g2, g.Token, err)
	}
	if err := b.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}

	// The server's E: a key with a space would break the line; a key of
	// 251 bytes is one the server refuses with "E <id> key".
	long := strings.Repeat("k", KeyMax+1)
	if _, err := a.Acquire(ctx, long, 30*time.Second, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("local check: %v", err)
	}
	res := a.do(ctx, &req{typ: 'A', key: long, leaseMs: 30000, waitMs: 0})
	if res.outcome != oInvalid || res.reason != "key" {
		t.Fatalf("server E for a long key: %+v", res)
	}
	res = a.do(ctx, &req{typ: 'A', key: "ok", leaseMs: 999, waitMs: 0})
	if res.outcome != oInvalid || res.reason != "lease" {
		t.Fatalf("server E for a short lease: %+v", res)
	}
	var e *Error
	if _, err := a.Acquire(ctx, "x", 500*time.Millisecond, 0); !errors.As(err, &e) || e.Reason != "lease" {
		t.Fatalf("local lease check: %v", err)
	}
	if s := a.Stats(); s.Indeterminate != 0 || s.Handshakes < 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A wrong secret: nothing is sent, the error says so and matches ErrAuth.
func TestWrongSecret(t *testing.T) {
	n, _ := standalone(t)
	other := writeSecret(t, t.TempDir(), "other.secret")
	c := dial(t, []string{n.addr()}, other, nil)
	_, err := c.Acquire(ctxT(t, 30*time.Second), "k", 5*time.Second, 0)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrAuth) {
		t.Fatalf("want ErrUnavailable and ErrAuth, got %v", err)
	}
	if !strings.Contains(err.Error(), "authentication refused") || !strings.Contains(err.Error(), n.addr()) {
		t.Fatalf("the message does not name the cause: %v", err)
	}
	if c.Stats().AuthFailures == 0 {
		t.Fatal("no auth failure counted")
	}
}

// Cancellation before any byte was written: not acquired (ErrCancelled),
// never ErrIndeterminate. Nothing listens on the address, so nothing can
// be written.
func TestCancelBeforeSend(t *testing.T) {
	p := freePorts3(t, nil)
	secret := writeSecret(t, t.TempDir(), "s")
	c := dial(t, []string{"127.0.0.1:" + strconv.Itoa(p)}, secret, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	_, err := c.Acquire(ctx, "k", 5*time.Second, 10*time.Second)
	if !errors.Is(err, ErrCancelled) || errors.Is(err, ErrIndeterminate) {
		t.Fatalf("want ErrCancelled, got %v", err)
	}
	if !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("the error does not say the context ended: %v", err)
	}
	if s := c.Stats(); s.RequestsWritten != 0 || s.RequestsInProgress != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Cancellation of a written acquire: ErrIndeterminate, and when the grant
// comes later it is released at once (compensation).
func TestCancelAfterSendCompensates(t *testing.T) {
	n, secret := standalone(t)
	holder := dial(t, []string{n.addr()}, secret, nil)
	waiter := dial(t, []string{n.addr()}, secret, nil)
	ctx := ctxT(t, 60*time.Second)
	g, err := holder.Acquire(ctx, "drop", 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(wctx, "drop", 30*time.Second, 20*time.Second)
		errc <- err
	}()
	// Queued on the server: the acquire was written.
	waitFor(t, 10*time.Second, func() bool {
		q, err := holder.Query(ctx, "drop")
		return err == nil && q.Waiters == 1
	})
	cancel()
	if err := <-errc; !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("want ErrIndeterminate, got %v", err)
	}
	// The handoff grants the cancelled waiter; its client releases it.
	if err := holder.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		q, err := holder.Query(ctx, "drop")
		return err == nil && !q.Held
	})
	// The key is free once the server took the compensation's release;
	// its R may still be on the way back, so the queue empties after.
	waitFor(t, 10*time.Second, func() bool {
		s := waiter.Stats()
		return s.Compensations == 1 && s.ReleasesQueued == 0
	})
	if s := waiter.Stats(); s.Indeterminate != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// The lease counts from the first write of the acquire. A waiter queued
// behind a holder for longer than its own lease gets its G only after that
// lease ran out: ErrIndeterminate with Reason "lease", never a Grant, and
// its client releases the token at once (one compensation). A waiter whose
// lease outlasts the queueing is granted as usual.
func TestGrantAfterLeaseIsIndeterminate(t *testing.T) {
	n, secret := standalone(t)
	holder := dial(t, []string{n.addr()}, secret, nil)
	waiter := dial(t, []string{n.addr()}, secret, nil)
	ctx := ctxT(t, 60*time.Second)
	queued := func(key string, lease time.Duration) (Grant, time.Duration, error) {
		g, err := holder.Acquire(ctx, key, 30*time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		type out struct {
			g   Grant
			err error
		}
		outc := make(chan out, 1)
		t0 := time.Now()
		go func() {
			wg, err := waiter.Acquire(ctx, key, lease, 10*time.Second)
			outc <- out{wg, err}
		}()
		waitFor(t, 10*time.Second, func() bool {
			q, err := holder.Query(ctx, key)
			return err == nil && q.Waiters == 1
		})
		time.Sleep(1500*time.Millisecond - time.Since(t0))
		if err := holder.Release(ctx, g); err != nil { // FIFO handoff to the waiter
			t.Fatal(err)
		}
		o := <-outc
		return o.g, time.Since(t0), o.err
	}

	_, took, err := queued("lease-late", time.Second)
	var e *Error
	if !errors.Is(err, ErrIndeterminate) || !errors.As(err, &e) || e.Reason != "lease" {
		t.Fatalf("want ErrIndeterminate (lease), got %v", err)
	}
	if took < time.Second {
		t.Fatalf("decided after %v, before the lease ran out", took)
	}
	waitFor(t, 10*time.Second, func() bool { return waiter.Stats().ReleasesQueued == 0 })
	if s := waiter.Stats(); s.Compensations != 1 || s.CompensationsDropped != 0 || s.Indeterminate != 1 {
		t.Fatalf("stats %+v", s)
	}
	waitFor(t, 10*time.Second, func() bool {
		q, err := holder.Query(ctx, "lease-late")
		return err == nil && !q.Held
	})

	g, _, err := queued("lease-ok", 5*time.Second)
	if err != nil || time.Until(g.LeaseDeadline) <= 0 {
		t.Fatalf("want a Grant with lease left, got %+v, %v", g, err)
	}
	if err := waiter.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if s := waiter.Stats(); s.Compensations != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func waitFor(t *testing.T, d time.Duration, f func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !f() {
		if time.Now().After(end) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Goroutines of one client queue on one key in a known order: they are
// granted in that order (FIFO), tokens increase, and no two ever hold it.
func TestConcurrentFIFO(t *testing.T) {
	n, secret := standalone(t)
	c := dial(t, []string{n.addr()}, secret, nil)
	obs := dial(t, []string{n.addr()}, secret, nil)
	ctx := ctxT(t, 90*time.Second)
	const workers = 8
	first, err := obs.Acquire(ctx, "hot", 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	var holders int32
	var mu sync.Mutex
	var order []int
	var tokens []uint64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			g, err := c.Acquire(ctx, "hot", 30*time.Second, 60*time.Second)
			if err != nil {
				errs <- err
				return
			}
			if atomic.AddInt32(&holders, 1) != 1 {
				errs <- errors.New("two holders at once")
			}
			mu.Lock()
			order = append(order, i)
			tokens = append(tokens, g.Token)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			atomic.AddInt32(&holders, -1)
			if err := c.Release(ctx, g); err != nil {
				errs <- err
			}
		}(i)
		// The next one starts only once this one is queued on the server.
		waitFor(t, 10*time.Second, func() bool {
			q, err := obs.Query(ctx, "hot")
			return err == nil && q.Waiters == uint32(i+1)
		})
	}
	if err := obs.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range order {
		if order[i] != i {
			t.Fatalf("grant order %v, want 0..%d", order, workers-1)
		}
		if i > 0 && tokens[i] <= tokens[i-1] || tokens[i] <= first.Token {
			t.Fatalf("tokens not increasing: %d then %v", first.Token, tokens)
		}
	}
}

// A 3-node cluster: only the leader serves, so every grant below came from
// the leader the client found (through M or by trying); a lock held
// before the leader is killed is still held (same token) on the new
// leader, and a new grant there has a larger token.
func TestClusterFailover(t *testing.T) {
	cl := startCluster(t)
	c := dial(t, cl.addrs(), cl.secret, nil)
	ctx := ctxT(t, 90*time.Second)
	g, err := c.Acquire(ctx, "seat-1", 60*time.Second, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lead := cl.leader(time.Second)
	if lead < 0 {
		t.Fatal("no leader")
	}
	// Two of the three connections reach followers, which answer M.
	if s := c.Stats(); s.Moved == 0 {
		t.Fatalf("no M seen: %+v", s)
	}
	cl.nodes[lead].kill()
	var g2 Grant
	for {
		if ctx.Err() != nil {
			t.Fatal("no grant after the leader was killed")
		}
		g2, err = c.Acquire(ctx, "seat-2", 30*time.Second, 5*time.Second)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrIndeterminate) {
			t.Fatalf("acquire during failover: %v", err)
		}
	}
	if g2.Token <= g.Token {
		t.Fatalf("token %d after the failover is not above %d", g2.Token, g.Token)
	}
	nl := cl.leader(5 * time.Second)
	if nl < 0 || nl == lead {
		t.Fatalf("new leader %d (old %d)", nl, lead)
	}
	q, err := c.Query(ctx, "seat-1")
	if err != nil || !q.Held || q.Token != g.Token || q.Owner != c.Owner() {
		t.Fatalf("the lock held before the failover: %+v %v", q, err)
	}
	if err := c.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
}

// The writer's check before a write: a connection whose server end has
// closed (its FIN is all that is left to read) is seen as closed, one with
// nothing to read yet or with bytes still unread is not. The server here
// closes after refusing a bad proof.
func TestPeerClosedSeesTheServersClose(t *testing.T) {
	n, _ := standalone(t)
	raw, err := net.Dial("tcp", n.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	br := bufio.NewReader(raw)
	if _, err := br.ReadString('\n'); err != nil { // the banner
		t.Fatal(err)
	}
	if peerClosed(raw) {
		t.Fatal("an open connection with nothing to read was seen as closed")
	}
	if _, err := io.WriteString(raw, "AUTH "+strings.Repeat("0", 64)+" "+strings.Repeat("0", 64)+"\n"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for br.Buffered() == 0 && time.Now().Before(deadline) {
		if peerClosed(raw) {
			t.Fatal("seen as closed while the refusal was still unread")
		}
		raw.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		br.Peek(1)
	}
	raw.SetReadDeadline(time.Time{})
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "E ") {
		t.Fatalf("no refusal: %q %v", line, err)
	}
	for !peerClosed(raw) {
		if time.Now().After(deadline) {
			t.Fatal("the server's close was never seen")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
