// Package ticketing is the official Go client of Ticketing, a distributed
// FIFO lock service. It follows the same rules as the C library
// libticketing (docs/client.md): connections kept in the background, leader
// first, pipelined requests, byte-level "sent" tracking (an acquire none of
// whose bytes was written is ErrUnavailable, one that was written is never
// resent), compensation of late grants, and one bounded release queue with
// an absolute 5 s deadline per release.
//
// Groups (SPEC 15): one Client serves a deployment of several groups. It
// is given the addresses of one group (the seed) and sends everything
// there until a group answers W; it then fetches that group's ring (the
// newer one wins), and routes each Acquire, Release and Query by its key's
// slot (Slot(key)) to the group the ring names, with a connection set per
// group made on first use. A request answered W goes again, to the group
// the ring now names, while its budget lasts; ErrWrongGroup (definite:
// nothing was done; the Error carries Slot and RingVersion) only when the
// budget ends or the ring names no group for the slot. Stats().RingVersion
// and Stats().Rerouted report it; Client.Ring asks the seed group.
//
// A Client is safe for concurrent use by many goroutines. One goroutine owns
// every connection, timer and outcome (the loop); each connection has a
// reader and a writer goroutine that only move bytes.
package ticketing

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sentinel errors: every outcome of the C library that is not a success has
// one. Errors returned by the calls wrap them (use errors.Is) and carry the
// detail: the server's reason word, or the last connection failure.
var (
	ErrBusy          = errors.New("busy")          // B: held and wait 0, or a server bound
	ErrTimeout       = errors.New("timeout")       // T: the wait ran out; not acquired
	ErrInvalid       = errors.New("invalid")       // E <id> <reason>, or refused locally
	ErrUnavailable   = errors.New("unavailable")   // nothing written in time (acquire: definitely not acquired)
	ErrIndeterminate = errors.New("indeterminate") // written, no answer: maybe acquired; do not enter
	ErrCancelled     = errors.New("cancelled")     // context ended (or Close) before a byte was written
	ErrNotHeld       = errors.New("not held")      // N: nothing held under (key, owner, token)
	ErrUnconfirmed   = errors.New("unconfirmed")   // no R or N before the 5 s deadline
	ErrQueueFull     = errors.New("queue full")    // the release queue is full; nothing enqueued
	// ErrWrongGroup: W, the group does not serve the key's slot (SPEC 15),
	// and the client could not reach the group that does within the
	// request's budget (a move in progress), or its ring names no group
	// for the slot. Definite: nothing was done (a release: nothing
	// released). The Error's Slot and RingVersion are those of the last
	// W: which slot, and which ring that group judged by.
	ErrWrongGroup = errors.New("wrong group")
	// ErrAuth is matched, in addition to ErrUnavailable, by an error whose
	// cause is a refused handshake (a wrong secret, or a server that does
	// not know ours).
	ErrAuth = errors.New("authentication failed")
)

// Error is the error every call returns: an outcome (one of the sentinels
// above, which errors.Is matches) with its detail.
type Error struct {
	Op      string // "acquire", "release", "query", "ping", "ring", "dial"
	Key     string
	Outcome error  // the sentinel
	Reason  string // the server's or the client's reason word ("key", "tls", "shutdown", ...)
	Detail  string // the last connection failure, for UNAVAILABLE
	Resent  bool   // release: written more than once
	// ErrWrongGroup: the key's slot, and the version of the ring the group
	// judged by (0: it has none).
	Slot        uint32
	RingVersion uint64
	auth        bool
}

func (e *Error) Error() string {
	s := "ticketing: " + e.Op
	if e.Key != "" {
		s += " " + e.Key
	}
	s += ": " + e.Outcome.Error()
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	if e.Outcome == ErrWrongGroup {
		s += fmt.Sprintf(" (slot %d, ring version %d)", e.Slot, e.RingVersion)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *Error) Unwrap() error { return e.Outcome }

// Is makes errors.Is(err, ErrAuth) true for an authentication failure.
func (e *Error) Is(target error) bool { return target == ErrAuth && e.auth }

// Config configures a Client. Zero fields take the defaults.
type Config struct {
	// Addrs: "host:port" each ("[v6addr]:port" for IPv6), at most 8; an
	// element may also hold several, separated by commas. With exactly one
	// address the client keeps two connections to it. They are the seed
	// group's: the group of a ring whose addresses include one of them is
	// the seed itself. The other groups of the ring get their own
	// connections, from the ring's addresses, with the same secret, owner,
	// TLS settings and knobs.
	Addrs []string
	// The client secret: a file (its bytes less one trailing "\n" or
	// "\r\n") or the bytes themselves; 16-4096 bytes.
	SecretFile string
	Secret     []byte
	// Owner name (1-64 bytes, 0x21-0x7E); default "<host>-<pid>-<12 hex>".
	Owner string

	ConnectTimeout  time.Duration // one attempt: TCP + TLS + handshake + probe; 5 s
	ResponseGrace   time.Duration // past the sent wait before INDETERMINATE; 2 s
	SendBudgetMin   time.Duration // floor of an unsent acquire's budget; 1 s
	RequestTimeout  time.Duration // query and ping; 5 s
	BackoffMin      time.Duration // reconnect backoff; 100 ms
	BackoffMax      time.Duration // 3.2 s
	ReleaseQueueMax int           // 1024
	RequestsMax     int           // acquires, queries, pings in progress; 65536
	InflightMax     int           // requests on one connection; 4096

	// TLS: TLSCAFile turns it on and verifies the servers; the client
	// certificate and key go together; the name checked is TLSServerName,
	// else the host dialled. Any of the others without TLSCAFile is refused.
	TLSCAFile, TLSCertFile, TLSKeyFile, TLSServerName string

	// Logf, if set, receives connection events (level 0 error .. 3 debug),
	// on the client's loop goroutine: keep it short.
	Logf func(level int, msg string)
}

// Grant is a held lock.
type Grant struct {
	Key   string
	Token uint64 // the fencing token: pass it to every protected write
	// LeaseDeadline is when the lease ends for certain, counted from the
	// first write of the acquire (earlier than the server's commit). It
	// carries a monotonic clock reading: compare it with time.Now().
	LeaseDeadline time.Time
}

// QueryResult is the committed holder of a key.
type QueryResult struct {
	Held    bool
	Owner   string
	Token   uint64
	Waiters uint32
}

// RingResult is the ring of the seed group (SPEC 15, docs/protocol.md
// section 10).
type RingResult struct {
	Version uint64 // 0: no ring yet
	// Body is the ring's ranges "<first>-<last>=<group>@<addr>[,<addr>...]"
	// joined by ";" in increasing order, "-" when it has none. An answer
	// the server sent in several lines arrives here joined.
	Body string
}

// Ranges are the body's ranges (none for "-").
func (r RingResult) Ranges() []string {
	if r.Body == "-" || r.Body == "" {
		return nil
	}
	return strings.Split(r.Body, ";")
}

// Stats are counters of the client. Connections and ConnectionsReady
// count every group's; LeaderHint is the seed group's.
type Stats struct {
	Connections, ConnectionsReady                       int
	ConnectAttempts, Handshakes, AuthFailures, Moved    uint64
	RequestsWritten, RequestsInProgress                 uint64
	ReleasesQueued, Compensations, CompensationsDropped uint64
	Indeterminate                                       uint64
	LeaderHint                                          string
	// RingVersion is the version of the ring the client routes by (0:
	// none yet); Rerouted counts the requests sent again after a W;
	// Groups is the number of groups with a connection set, the seed's
	// included.
	RingVersion, Rerouted uint64
	Groups                int
}

// Client is a client of one Ticketing deployment: the seed group's
// connections, and those of every other group its ring routes to.
type Client struct {
	cfg     Config
	owner   string
	secret  []byte
	tlsConf *tls.Config
	addrs   []string
	t0      time.Time

	submitCh chan *req
	cancelCh chan *req
	evCh     chan event
	stopCh   chan struct{}
	quit     chan struct{} // closed when the loop has ended
	stopOnce sync.Once

	mu         sync.Mutex
	lastErr    string
	lastAuth   bool // lastErr is a refused handshake
	leaderHint string
	ready      int

	liveReq, liveRel atomic.Int64
	st               struct {
		attempts, handshakes, authFail, moved, written, comp, compDropped, indet atomic.Uint64
		ringVer, rerouted                                                        atomic.Uint64
		conns, groups                                                            atomic.Int64
	}

	lp loop // owned by the loop goroutine
}

func orDur(v, d time.Duration) time.Duration {
	if v <= 0 {
		return d
	}
	return v
}

func orInt(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

func loadSecret(cfg *Config) ([]byte, error) {
	var b []byte
	switch {
	case cfg.SecretFile != "" && cfg.Secret != nil:
		return nil, errors.New("both SecretFile and Secret set")
	case cfg.SecretFile != "":
		raw, err := os.ReadFile(cfg.SecretFile)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(string(raw), "\r\n") {
			raw = raw[:len(raw)-2]
		} else if strings.HasSuffix(string(raw), "\n") {
			raw = raw[:len(raw)-1]
		}
		b = raw
	default:
		b = append([]byte(nil), cfg.Secret...)
	}
	if len(b) < secretMin || len(b) > secretMax {
		return nil, fmt.Errorf("secret must be %d-%d bytes, got %d", secretMin, secretMax, len(b))
	}
	return b, nil
}

func defaultOwner() string {
	host, _ := os.Hostname()
	hb := []byte(host)
	for i, c := range hb {
		if c < 0x21 || c > 0x7e {
			hb[i] = '_'
		}
	}
	if len(hb) == 0 {
		hb = []byte("host")
	}
	if len(hb) > 32 {
		hb = hb[:32]
	}
	var r [6]byte
	rand.Read(r[:])
	return fmt.Sprintf("%s-%d-%s", hb, os.Getpid(), hex.EncodeToString(r[:]))
}

func tlsConfig(cfg *Config) (*tls.Config, error) {
	if cfg.TLSCAFile == "" {
		if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" || cfg.TLSServerName != "" {
			return nil, errors.New("TLS fields set without TLSCAFile: refusing to connect in plaintext")
		}
		return nil, nil
	}
	pem, err := os.ReadFile(cfg.TLSCAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", cfg.TLSCAFile)
	}
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return nil, errors.New("TLSCertFile and TLSKeyFile go together")
	}
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Dial checks the configuration and starts the client; it does not wait
// for a connection (the first requests wait within their budget).
func Dial(cfg Config) (*Client, error) {
	fail := func(err error) (*Client, error) {
		return nil, &Error{Op: "dial", Outcome: ErrInvalid, Detail: err.Error()}
	}
	cfg.ConnectTimeout = orDur(cfg.ConnectTimeout, 5*time.Second)
	cfg.ResponseGrace = orDur(cfg.ResponseGrace, 2*time.Second)
	cfg.SendBudgetMin = orDur(cfg.SendBudgetMin, time.Second)
	cfg.RequestTimeout = orDur(cfg.RequestTimeout, 5*time.Second)
	cfg.BackoffMin = orDur(cfg.BackoffMin, 100*time.Millisecond)
	cfg.BackoffMax = orDur(cfg.BackoffMax, 3200*time.Millisecond)
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = cfg.BackoffMin
	}
	cfg.ReleaseQueueMax = orInt(cfg.ReleaseQueueMax, 1024)
	cfg.RequestsMax = orInt(cfg.RequestsMax, 65536)
	cfg.InflightMax = orInt(cfg.InflightMax, 4096)
	var addrs []string
	for _, a := range cfg.Addrs {
		for _, p := range strings.Split(a, ",") {
			if p = strings.TrimSpace(p); p != "" {
				if _, _, err := splitAddr(p); err != nil {
					return fail(err)
				}
				addrs = append(addrs, p)
			}
		}
	}
	if len(addrs) == 0 || len(addrs) > addrsMax {
		return fail(fmt.Errorf("need 1-%d addresses, got %d", addrsMax, len(addrs)))
	}
	secret, err := loadSecret(&cfg)
	if err != nil {
		return fail(err)
	}
	owner := cfg.Owner
	if owner == "" {
		owner = defaultOwner()
	} else if !ownerOK(owner) {
		return fail(errors.New("owner must be 1-64 bytes of 0x21-0x7E"))
	}
	tc, err := tlsConfig(&cfg)
	if err != nil {
		return fail(err)
	}
	c := &Client{cfg: cfg, owner: owner, secret: secret, tlsConf: tc, addrs: addrs, t0: time.Now(),
		submitCh: make(chan *req, 256), cancelCh: make(chan *req, 64),
		evCh: make(chan event, 1024), stopCh: make(chan struct{}), quit: make(chan struct{})}
	c.lp.init(c)
	go c.run()
	return c, nil
}

// Owner is the owner name this client sends.
func (c *Client) Owner() string { return c.owner }

// LastError is the most recent connection failure, one sentence starting
// with the address ("" if none yet).
func (c *Client) LastError() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	hint, ready := c.leaderHint, c.ready
	c.mu.Unlock()
	return Stats{Connections: int(c.st.conns.Load()), ConnectionsReady: ready,
		ConnectAttempts: c.st.attempts.Load(), Handshakes: c.st.handshakes.Load(),
		AuthFailures: c.st.authFail.Load(), Moved: c.st.moved.Load(),
		RequestsWritten: c.st.written.Load(), RequestsInProgress: uint64(c.liveReq.Load()),
		ReleasesQueued: uint64(c.liveRel.Load()), Compensations: c.st.comp.Load(),
		CompensationsDropped: c.st.compDropped.Load(), Indeterminate: c.st.indet.Load(),
		LeaderHint: hint, RingVersion: c.st.ringVer.Load(), Rerouted: c.st.rerouted.Load(),
		Groups: int(c.st.groups.Load())}
}

func ms(d time.Duration) (uint32, bool) {
	if d < 0 || d/time.Millisecond > 1<<31 {
		return 0, false
	}
	return uint32(d / time.Millisecond), true
}

// Acquire takes key for lease (1 s-250 s), waiting at most wait (0-250 s;
// 0 = one immediate try) for its turn. nil error: the Grant is held.
// ErrBusy, ErrTimeout, ErrUnavailable, ErrCancelled: not acquired.
// ErrIndeterminate (the request was written and no answer came, or ctx
// ended after it was written): maybe acquired; do not enter the critical
// section; a grant that still arrives is released at once. ErrIndeterminate
// with Reason "lease": the grant came, but only after the lease counted from
// the first write had run out; it was released at once, do not enter.
// ErrWrongGroup: no group served the key's slot within the budget
// (max(wait, SendBudgetMin), resends after W included, each waiting what
// is left of wait); not acquired. A grant from a resend counts its lease
// from that resend's first write.
func (c *Client) Acquire(ctx context.Context, key string, lease, wait time.Duration) (Grant, error) {
	l, okl := ms(lease)
	w, okw := ms(wait)
	switch {
	case !keyOK(key):
		return Grant{}, &Error{Op: "acquire", Key: key, Outcome: ErrInvalid, Reason: "key"}
	case !okl || l < LeaseMinMs || l > LeaseMaxMs:
		return Grant{}, &Error{Op: "acquire", Key: key, Outcome: ErrInvalid, Reason: "lease"}
	case !okw || w > WaitMaxMs:
		return Grant{}, &Error{Op: "acquire", Key: key, Outcome: ErrInvalid, Reason: "wait"}
	}
	res := c.do(ctx, &req{typ: 'A', key: key, leaseMs: l, waitMs: w})
	if res.outcome != oAcquired {
		return Grant{}, c.errOf("acquire", key, res)
	}
	return Grant{Key: key, Token: res.token, LeaseDeadline: c.t0.Add(res.leaseEnd)}, nil
}

// Release releases g through the release queue: nil (R), ErrNotHeld (N),
// ErrUnconfirmed (no answer by the absolute 5 s deadline; never assume
// success), ErrQueueFull (at once), ErrWrongGroup (no group served the
// key's slot before the 5 s deadline, resends after W included: nothing
// released). If ctx ends first, the release goes on in the background and
// the call returns ErrUnconfirmed.
func (c *Client) Release(ctx context.Context, g Grant) error {
	_, err := c.ReleaseToken(ctx, g.Key, g.Token)
	return err
}

// ReleaseToken releases (key, this client's owner, token) and also says
// whether the release was written more than once (its connection died
// after a write): then ErrNotHeld may mean an earlier attempt released it.
func (c *Client) ReleaseToken(ctx context.Context, key string, token uint64) (resent bool, err error) {
	if !keyOK(key) {
		return false, &Error{Op: "release", Key: key, Outcome: ErrInvalid, Reason: "key"}
	}
	if token == 0 {
		return false, &Error{Op: "release", Key: key, Outcome: ErrInvalid, Reason: "token"}
	}
	res := c.do(ctx, &req{typ: 'R', key: key, token: token})
	if res.outcome == oReleased {
		return res.resent, nil
	}
	return res.resent, c.errOf("release", key, res)
}

// Query reads the committed holder of key (linearizable), from the group
// that serves its slot. ErrWrongGroup: no group served it within
// RequestTimeout, resends after W included.
func (c *Client) Query(ctx context.Context, key string) (QueryResult, error) {
	if !keyOK(key) {
		return QueryResult{}, &Error{Op: "query", Key: key, Outcome: ErrInvalid, Reason: "key"}
	}
	res := c.do(ctx, &req{typ: 'Q', key: key})
	if res.outcome != oAnswered {
		return QueryResult{}, c.errOf("query", key, res)
	}
	return QueryResult{Held: res.held, Owner: res.owner, Token: res.token, Waiters: res.waiters}, nil
}

// Ping makes one round trip to the seed group and returns its time.
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	res := c.do(ctx, &req{typ: 'P'})
	if res.outcome != oAnswered {
		return 0, c.errOf("ping", "", res)
	}
	return res.rtt, nil
}

// Ring asks the seed group for its ring ("S"): the ring its leader has applied
// (Version 0 and Body "-" when it has none), or ErrUnavailable (no answer
// within RequestTimeout) or ErrCancelled, as Ping. Not a linearizable read:
// a ring is only ever replaced by a newer one, and an ErrWrongGroup carries
// the version its group judged by.
func (c *Client) Ring(ctx context.Context) (RingResult, error) {
	res := c.do(ctx, &req{typ: 'S'})
	if res.outcome != oAnswered {
		return RingResult{}, c.errOf("ring", "", res)
	}
	return RingResult{Version: res.ringVer, Body: res.body}, nil
}

// Close stops the client: acquires, queries and pings not decided end
// ErrCancelled; queued releases keep their 5 s deadline (Close waits for
// them, at most about 5 s); then every connection closes.
func (c *Client) Close() error {
	c.stopOnce.Do(func() { close(c.stopCh) })
	<-c.quit
	return nil
}

func (c *Client) errOf(op, key string, r result) error {
	e := &Error{Op: op, Key: key, Reason: r.reason, Resent: r.resent}
	switch r.outcome {
	case oBusy:
		e.Outcome = ErrBusy
	case oTimeout:
		e.Outcome = ErrTimeout
	case oInvalid:
		e.Outcome = ErrInvalid
	case oIndeterminate:
		e.Outcome = ErrIndeterminate
	case oCancelled:
		e.Outcome = ErrCancelled
	case oNotHeld:
		e.Outcome = ErrNotHeld
	case oUnconfirmed:
		e.Outcome = ErrUnconfirmed
	case oQueueFull:
		e.Outcome = ErrQueueFull
	case oWrongGroup:
		e.Outcome, e.Slot, e.RingVersion = ErrWrongGroup, r.slot, r.ringVer
	default:
		e.Outcome = ErrUnavailable
		c.mu.Lock()
		e.Detail = c.lastErr
		c.mu.Unlock()
		e.auth = c.lastAuth
		if e.Detail != "" && r.reason == "" && e.Outcome == ErrUnavailable {
			e.Detail += "; nothing was sent"
		}
	}
	if r.ctxErr != nil {
		e.Detail = r.ctxErr.Error()
	}
	return e
}

// OutcomeName is the C library's outcome name for what a call returned:
// ACQUIRED/RELEASED/ANSWERED for a nil error of acquire/release/query-ping-ring
// (pass the op), else the name of the sentinel the error wraps.
func OutcomeName(op string, err error) string {
	if err == nil {
		switch op {
		case "acquire":
			return "ACQUIRED"
		case "release":
			return "RELEASED"
		}
		return "ANSWERED"
	}
	for _, p := range []struct {
		e error
		n string
	}{{ErrBusy, "BUSY"}, {ErrTimeout, "TIMEOUT"}, {ErrInvalid, "INVALID"},
		{ErrIndeterminate, "INDETERMINATE"}, {ErrCancelled, "CANCELLED"},
		{ErrNotHeld, "NOT_HELD"}, {ErrUnconfirmed, "UNCONFIRMED"},
		{ErrQueueFull, "QUEUE_FULL"}, {ErrWrongGroup, "WRONG_GROUP"},
		{ErrUnavailable, "UNAVAILABLE"}} {
		if errors.Is(err, p.e) {
			return p.n
		}
	}
	return "UNAVAILABLE"
}

func cryptoRead(b []byte) error {
	_, err := rand.Read(b)
	return err
}
