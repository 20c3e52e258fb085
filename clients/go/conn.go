package ticketing

// One connection of the client. The loop owns its state; an attempt
// goroutine dials (TCP, TLS when configured), runs the handshake (the
// server's proof is checked before anything it says is believed, an M
// included) and a probe ping ("P 0"), then turns into the reader; a writer
// goroutine writes the chunks the loop hands it, one at a time.
//
// "Written" is tracked in bytes: each request records the stream offset of
// its line (pos). Bytes still in wbuf were handed to nobody: such a request
// is untouched and may be neutered or retried elsewhere. A chunk handed to
// the writer may be leaving at any moment, so its requests count as written
// unless the writer reports that it stopped short of them, or the
// connection is torn down before the writer began (see gate). The writer
// writes nothing to a connection whose server end it already sees closed:
// its requests then stay unwritten and go out again on the next one.

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	addrsMax = 8
	extraMax = 4
	wbufHigh = 64 * 1024
	probeID  = 0
)

const (
	stIdle = iota
	stConnecting
	stReady
	stRetired
)

type evKind int

const (
	evReady evKind = iota
	evLine
	evDown
	evWritten
)

type event struct {
	kind       evKind
	k          *conn
	gen        uint64
	rsp        response
	n          int
	err        error
	why        string
	record     bool
	tlsRefused bool
	auth       bool
	moved      bool
	movedTo    string
	nc         net.Conn
	wch        chan []byte
	gate       *gate
}

// gate settles, for the chunk handed to the writer last, whether it left:
// the writer marks it started just before its write, and a teardown that
// comes first takes it back (revoked), so its requests stay unwritten.
type gate struct {
	mu      sync.Mutex
	started bool
	revoked bool
}

type conn struct {
	c           *Client
	g           *group // the group it belongs to
	idx         int
	extra       bool
	addr        string
	state       int
	gen         uint64
	backoff     time.Duration
	nextAttempt time.Duration
	tlsRefused  bool

	nc       net.Conn
	wch      chan []byte
	gate     *gate
	wbuf     []byte
	appended uint64 // stream offset after the last byte appended
	handed   uint64 // bytes handed to the writer
	written  uint64 // bytes the writer reported written
	writing  bool
	handAt   time.Duration // clock read just before the chunk was handed over
	unsent   []*req        // queued, not known written, in stream order
	slots    map[uint64]*req
	nextID   uint64
	inflight int
}

func splitAddr(a string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(a)
	if err != nil {
		return "", "", fmt.Errorf("address %q: %v", a, err)
	}
	p, ok := parseU64(port)
	if host == "" || !visible(host) || !ok || p == 0 || p > 65535 {
		return "", "", fmt.Errorf("address %q: want host:port", a)
	}
	return host, port, nil
}

func newConn(c *Client, g *group, idx int, addr string, extra bool) *conn {
	k := &conn{c: c, g: g, idx: idx, extra: extra, slots: map[uint64]*req{}}
	k.setAddr(addr, 0)
	return k
}

func (k *conn) setAddr(addr string, now time.Duration) {
	k.addr = addr
	k.state = stIdle
	k.backoff = k.c.cfg.BackoffMin
	k.nextAttempt = now
}

func (k *conn) hasRoom() bool {
	return k.state == stReady && k.inflight < k.c.cfg.InflightMax && len(k.wbuf) < wbufHigh
}

// ---- the loop's side ---------------------------------------------------------------

func (k *conn) start(now time.Duration) {
	k.gen++
	k.state = stConnecting
	k.c.st.attempts.Add(1)
	go k.c.attempt(k, k.gen, k.addr)
}

func (k *conn) queue(r *req, now time.Duration) {
	c := k.c
	id := k.nextID
	for {
		id++
		if _, taken := k.slots[id]; !taken && id != probeID {
			break
		}
	}
	k.nextID = id
	r.pos = k.appended
	n0 := len(k.wbuf)
	switch r.typ {
	case 'A':
		// The wait left of the caller's budget: a request that waited for
		// a connection, or goes again after a W, goes on within what
		// remains.
		r.waitSentMs = waitLeftMs(r.waitMs, r.submit, now)
		k.wbuf = appendAcquire(k.wbuf, id, r.key, c.owner, r.leaseMs, r.waitSentMs)
	case 'R':
		k.wbuf = appendRelease(k.wbuf, id, r.key, c.owner, r.token)
	case 'Q':
		k.wbuf = appendQuery(k.wbuf, id, r.key)
	case 'S':
		k.wbuf = appendRing(k.wbuf, id)
		r.ringParts, r.ringN, r.ringVer = nil, 0, 0 // parts start anew here
	default:
		k.wbuf = appendPing(k.wbuf, id)
	}
	k.appended += uint64(len(k.wbuf) - n0)
	r.wire, r.conn, r.id = wireQueued, k, id
	k.slots[id] = r
	k.inflight++
	k.unsent = append(k.unsent, r)
}

func (k *conn) canNeuter(r *req) bool { return r.pos >= k.handed }

// neuter turns an unsent line into "X <id> ...": the server answers
// "E <id> command" and changes nothing.
func (k *conn) neuter(r *req) {
	off := r.pos - k.handed
	if k.wbuf[off] != r.typ {
		panic("ticketing: neuter of a line that is not there")
	}
	k.wbuf[off] = 'X'
	r.neutered = true
}

func (k *conn) dropSlot(r *req) {
	delete(k.slots, r.id)
	k.inflight--
	if r.wire == wireQueued {
		for i, u := range k.unsent {
			if u == r {
				k.unsent = append(k.unsent[:i], k.unsent[i+1:]...)
				break
			}
		}
	}
	r.wire, r.conn = wireNone, nil
}

func (k *conn) markSent(upto uint64, at time.Duration) {
	l := &k.c.lp
	i := 0
	for ; i < len(k.unsent) && k.unsent[i].pos < upto; i++ {
		l.onSent(k.unsent[i], at)
	}
	if i > 0 {
		k.unsent = append(k.unsent[:0], k.unsent[i:]...)
	}
}

// flush hands what is buffered to the writer, if it is idle.
func (k *conn) flush(now time.Duration) {
	if k.state != stReady || k.writing || len(k.wbuf) == 0 {
		return
	}
	chunk := k.wbuf
	k.wbuf = make([]byte, 0, 256)
	k.handed += uint64(len(chunk))
	k.writing = true
	k.gate.mu.Lock() // the writer is idle: its last report came in
	k.gate.started, k.gate.revoked = false, false
	k.gate.mu.Unlock()
	k.handAt = k.c.now() // never later than the first byte leaving
	k.wch <- chunk       // capacity 1 and one chunk at a time: never blocks
}

// teardown closes the socket and gives every request back to the loop:
// the untouched ones first, in stream order, so they keep their place.
func (k *conn) teardown() {
	l := &k.c.lp
	if k.writing {
		k.gate.mu.Lock()
		if !k.gate.started { // the writer has not begun: nothing of it left
			k.gate.revoked = true
			k.handed = k.written
		}
		k.gate.mu.Unlock()
	}
	if k.nc != nil {
		k.nc.Close()
		k.nc = nil
	}
	if k.wch != nil {
		close(k.wch)
		k.wch = nil
	}
	if k.state == stReady {
		l.readyChange(-1)
	}
	k.gen++ // events of the old attempt are ignored from now on
	k.state = stIdle
	// A chunk the writer began writing may have left.
	k.markSent(k.handed, k.handAt)
	unsent := k.unsent
	k.unsent = nil
	k.wbuf, k.appended, k.handed, k.written, k.writing = k.wbuf[:0], 0, 0, 0, false
	for i := len(unsent) - 1; i >= 0; i-- {
		r := unsent[i]
		delete(k.slots, r.id)
		k.inflight--
		l.onConnLost(r)
	}
	for id, r := range k.slots {
		delete(k.slots, id)
		k.inflight--
		l.onConnLost(r)
	}
	k.nextID = 0
}

func (k *conn) retire() {
	k.teardown()
	k.state = stRetired
}

// down closes the connection and schedules the next attempt.
func (k *conn) down(why string, record, tlsRefused, auth bool, now time.Duration) {
	c, l := k.c, &k.c.lp
	lvl := 3
	if tlsRefused {
		lvl = 0
	} else if k.state == stReady {
		lvl = 1
	}
	c.logf(lvl, "connection to %s: %s", k.addr, why)
	if record {
		c.mu.Lock()
		c.lastErr = k.addr + ": " + why
		c.lastAuth = auth
		c.mu.Unlock()
	}
	k.teardown()
	k.tlsRefused = tlsRefused
	if k.extra && k.g.leader != k.idx {
		k.state = stRetired // the leader moved on from this address
		return
	}
	if tlsRefused {
		k.backoff = c.cfg.BackoffMax
	}
	// Jitter: a delay in [3/4, 1] of the step.
	lo := k.backoff * 3 / 4
	k.nextAttempt = now + lo + time.Duration(l.rng.Int63n(int64(k.backoff-lo)+1))
	k.backoff *= 2
	if k.backoff > c.cfg.BackoffMax {
		k.backoff = c.cfg.BackoffMax
	}
}

func (l *loop) event(ev event, now time.Duration) {
	k := ev.k
	if ev.gen != k.gen {
		if ev.kind == evReady { // an attempt the loop gave up on
			ev.nc.Close()
			close(ev.wch)
		}
		return
	}
	switch ev.kind {
	case evReady:
		k.nc, k.wch, k.gate = ev.nc, ev.wch, ev.gate
		k.state = stReady
		k.tlsRefused = false
		k.backoff = l.c.cfg.BackoffMin // a good handshake resets the backoff
		l.readyChange(1)
		l.c.logf(2, "connected to %s", k.addr)
	case evDown:
		if ev.auth {
			l.c.st.authFail.Add(1)
		}
		if ev.moved {
			l.onMoved(k.g, ev.movedTo, now)
		}
		k.down(ev.why, ev.record, ev.tlsRefused, ev.auth, now)
	case evWritten:
		k.writing = false
		k.written += uint64(ev.n)
		k.markSent(k.written, k.handAt)
		if ev.err != nil {
			// The writer stopped short: what it did not write never left.
			k.handed = k.written
			k.down("write: "+ev.err.Error(), true, false, false, now)
		}
	case evLine:
		l.line(k, &ev.rsp, now)
	}
}

func (l *loop) line(k *conn, rsp *response, now time.Duration) {
	switch {
	case rsp.typ == 'M':
		l.onMoved(k.g, rsp.text, now)
		k.down("not the leader (M)", false, false, false, now)
	case !rsp.hasID:
		k.down("server closed: E - "+rsp.text, true, false, false, now)
	default:
		r := k.slots[rsp.id]
		if r == nil {
			l.c.logf(3, "%s: answer for unknown id %d ignored", k.addr, rsp.id)
			return
		}
		if r.wire == wireQueued && r.pos < k.handed {
			// The answer beat the writer's report: the line left.
			k.markSent(r.pos+1, k.handAt)
		}
		if r.wire != wireSent || !fits(r, rsp.typ) {
			k.down("protocol: answer does not fit its request", true, false, false, now)
			return
		}
		if rsp.typ == 'S' {
			whole, done, ok := ringPart(r, rsp)
			if !ok {
				k.down(fmt.Sprintf("protocol: ring part %d/%d out of order", rsp.part, rsp.parts),
					true, false, false, now)
				return
			}
			if !done {
				return // more parts to come
			}
			rsp = &whole
		}
		k.dropSlot(r)
		l.onResponse(r, rsp, now)
	}
}

// ---- the goroutines ---------------------------------------------------------------

func (c *Client) send(ev event) bool {
	select {
	case c.evCh <- ev:
		return true
	case <-c.quit:
		return false
	}
}

func readLine(br *bufio.Reader) (string, error) {
	b, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull || (err == nil && len(b) > lineMax) {
		return "", errors.New("protocol: line too long")
	}
	if err != nil {
		return "", err
	}
	return string(b[:len(b)-1]), nil
}

func tlsRefusal(err error) bool {
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var rh tls.RecordHeaderError
	return errors.As(err, &ue) || errors.As(err, &he) || errors.As(err, &ci) ||
		errors.As(err, &rh) || strings.Contains(err.Error(), "remote error: tls")
}

// attempt runs one connection attempt, then reads until the connection ends.
func (c *Client) attempt(k *conn, gen uint64, addr string) {
	down := func(why string, record bool) {
		c.send(event{kind: evDown, k: k, gen: gen, why: why, record: record})
	}
	deadline := time.Now().Add(c.cfg.ConnectTimeout)
	host, _, _ := splitAddr(addr)
	d := net.Dialer{Deadline: deadline, KeepAlive: 10 * time.Second}
	raw, err := d.Dial("tcp", addr) // host names are looked up at every attempt
	if err != nil {
		why := "connect: " + err.Error()
		if oe, ok := err.(*net.OpError); ok && oe.Op == "dial" && oe.Err != nil {
			why = "connect: " + oe.Err.Error()
		}
		down(why, true)
		return
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	nc := raw
	if c.tlsConf != nil {
		conf := c.tlsConf.Clone()
		conf.ServerName = c.cfg.TLSServerName
		if conf.ServerName == "" {
			conf.ServerName = host
		}
		t := tls.Client(raw, conf)
		t.SetDeadline(deadline)
		if err := t.Handshake(); err != nil {
			raw.Close()
			refused := tlsRefusal(err)
			why := "TLS handshake failed: " + err.Error()
			if refused {
				why += fmt.Sprintf(" (CA file %s, server name %s)", c.cfg.TLSCAFile, conf.ServerName)
			}
			c.send(event{kind: evDown, k: k, gen: gen, why: why, record: true, tlsRefused: refused})
			return
		}
		nc = t
	}
	nc.SetDeadline(deadline)
	br := bufio.NewReaderSize(nc, 64*1024)
	ok := false
	defer func() {
		if !ok {
			nc.Close()
		}
	}()
	line, err := readLine(br)
	if err != nil {
		if errors.Is(err, io.EOF) {
			down("closed by the server before its banner", true)
		} else if ne, isNet := err.(net.Error); isNet && ne.Timeout() && c.tlsConf == nil {
			down("connected, but no banner from the server in time (a TLS port? then set TLSCAFile)", true)
		} else {
			down("handshake: "+err.Error(), true)
		}
		return
	}
	w := strings.Split(strings.TrimSuffix(line, "\r"), " ")
	if len(w) != 2 || w[0] != "TICKETING/1" || !isHex(w[1], 64) {
		if strings.HasPrefix(line, "E ") {
			down("refused (E before the banner): "+line, true)
		} else {
			down("not a Ticketing client port", true)
		}
		return
	}
	snonce := w[1]
	var nb [32]byte
	if err := cryptoRead(nb[:]); err != nil {
		down("no random bytes for a nonce", true)
		return
	}
	cnonce := hex.EncodeToString(nb[:])
	if _, err := io.WriteString(nc, "AUTH "+cnonce+" "+proof(c.secret, "client", snonce, cnonce)+"\n"); err != nil {
		down("handshake write: "+err.Error(), true)
		return
	}
	line, err = readLine(br)
	if err != nil {
		down("handshake: "+err.Error(), true)
		return
	}
	w = strings.Split(strings.TrimSuffix(line, "\r"), " ")
	if len(w) != 4 || w[0] != "OK" || !isHex(w[1], 64) || !isHex(w[2], 16) || !isHex(w[3], 32) {
		if line == "E - auth" {
			c.logf(0, "%s refused our proof: is the client secret right?", addr)
			c.send(event{kind: evDown, k: k, gen: gen, auth: true, record: true,
				why: "authentication refused (wrong secret?)"})
		} else {
			down("bad handshake answer", true)
		}
		return
	}
	if !hmacEqual(w[1], proof(c.secret, "server", snonce, cnonce)) {
		// This peer does not know our secret: nothing it says is believed.
		c.send(event{kind: evDown, k: k, gen: gen, auth: true, record: true,
			why: "wrong server proof (not our cluster, or another secret)"})
		return
	}
	c.st.handshakes.Add(1)
	if _, err := io.WriteString(nc, "P 0\n"); err != nil {
		down("probe write: "+err.Error(), true)
		return
	}
	line, err = readLine(br)
	if err != nil {
		down("probe: "+err.Error(), true)
		return
	}
	rsp, good := parseResponse(line)
	switch {
	case !good:
		down("protocol: malformed line", true)
		return
	case rsp.typ == 'M':
		c.send(event{kind: evDown, k: k, gen: gen, why: "not the leader (M)", moved: true, movedTo: rsp.text})
		return
	case rsp.typ == 'E' && !rsp.hasID:
		down("server closed: E - "+rsp.text, true)
		return
	case rsp.typ != 'P' || rsp.id != probeID:
		down("unexpected answer to the probe", true)
		return
	}
	nc.SetDeadline(time.Time{})
	wch, g := make(chan []byte, 1), &gate{}
	ok = true
	go c.writer(k, gen, nc, raw, wch, g)
	if !c.send(event{kind: evReady, k: k, gen: gen, nc: nc, wch: wch, gate: g}) {
		nc.Close()
		return
	}
	for {
		line, err := readLine(br)
		if err != nil {
			why := "closed by the server"
			if !errors.Is(err, io.EOF) {
				why = err.Error()
			}
			down(why, true)
			return
		}
		rsp, good := parseResponse(line)
		if !good {
			down("protocol: malformed line", true)
			return
		}
		if !c.send(event{kind: evLine, k: k, gen: gen, rsp: rsp}) {
			return
		}
	}
}

func (c *Client) writer(k *conn, gen uint64, nc, raw net.Conn, wch chan []byte, g *gate) {
	for chunk := range wch {
		g.mu.Lock()
		if g.revoked { // the loop tore the connection down first
			g.mu.Unlock()
			continue
		}
		closed := peerClosed(raw)
		g.started = !closed
		g.mu.Unlock()
		n, err := 0, errClosedBeforeWrite
		if !closed {
			n, err = nc.Write(chunk)
		}
		if !c.send(event{kind: evWritten, k: k, gen: gen, n: n, err: err}) {
			return
		}
	}
}

var errClosedBeforeWrite = errors.New("closed by the server before the write")

// peerClosed says whether the server's end of the connection is known to be
// closed (its FIN is the next thing to read) before a chunk is written.
// Writing there would only make its requests INDETERMINATE although the
// server can never read them; not writing leaves them unwritten, free to be
// sent again on the next connection. Peeking never consumes, and runs
// beside the reader's blocked read (Control takes no read lock).
func peerClosed(raw net.Conn) bool {
	tc, ok := raw.(*net.TCPConn)
	if !ok {
		return false
	}
	sc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	sc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n == 0 && err == nil
	})
	return closed
}

func hmacEqual(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	v := byte(0)
	for i := 0; i < len(a); i++ {
		v |= a[i] ^ b[i]
	}
	return v == 0
}
