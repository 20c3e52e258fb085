package ticketing

// The loop goroutine: it owns every connection, every timer and every
// outcome, as the C library's I/O thread does. API calls hand it requests
// (submitCh) and cancellations (cancelCh); connection goroutines hand it
// events (evCh). It never blocks on anything but its select.
//
// A request's deadline (the heap key) depends on where it is:
//   acquire, not yet written: submit + max(wait, SendBudgetMin), then
//     UNAVAILABLE (an unwritten line still in our buffer is neutered first:
//     its command letter becomes X, which the server answers E and ignores);
//   acquire, written: first write + wait as sent + ResponseGrace, then
//     INDETERMINATE (a G that comes at or after first write + lease is
//     INDETERMINATE too, reason "lease", and compensated);
//   release (explicit or compensation): enqueue + 5 s, then UNCONFIRMED;
//   query, ping, ring: submit + RequestTimeout, then UNAVAILABLE;
//   answered W (route.go): the same budget from submit, then WRONG_GROUP
//     unless it was written again meanwhile (the rules above then hold);
//     waiting for the ring fetch, or paused before going again to the
//     group that answered W, its key is the end of that wait;
//   decided but still holding an id on a connection (a zombie): a linger,
//     after which its id is forgotten. A grant for a zombie acquire is
//     released at once (compensation).

import (
	"container/heap"
	"container/list"
	"context"
	"fmt"
	"math/rand"
	"strings"
	"time"
)

type outcome int

const (
	oNone outcome = iota
	oAcquired
	oTimeout
	oBusy
	oInvalid
	oUnavailable
	oIndeterminate
	oCancelled
	oReleased
	oNotHeld
	oUnconfirmed
	oQueueFull
	oAnswered
	oWrongGroup
)

const (
	wireNone = iota
	wireQueued
	wireSent
)

const zombieLinger = 30 * time.Second

type result struct {
	outcome  outcome
	token    uint64
	leaseEnd time.Duration // since t0
	reason   string
	held     bool
	owner    string
	waiters  uint32
	resent   bool
	rtt      time.Duration
	ctxErr   error
	slot     uint32 // WRONG_GROUP: the key's slot
	ringVer  uint64 // WRONG_GROUP: the ring version judged by; ring: the ring's version
	body     string // ring: the ranges joined by ";" ("-": none)
}

type req struct {
	typ                     byte
	key                     string
	leaseMs, waitMs         uint32
	waitSentMs              uint32
	token                   uint64
	submit, sent, deadline  time.Duration
	everSent                bool
	hidx                    int
	elem                    *list.Element // on a pending list
	decided, neutered, comp bool
	resent, shutdown        bool
	wire                    int
	conn                    *conn
	id, pos                 uint64
	done                    chan result
	// S in parts: the bodies of parts 1..k seen on this connection, and
	// the n and version they gave.
	ringParts []string
	ringN     uint32
	ringVer   uint64
	// Routing (route.go): the key's slot, the group the request is pending
	// on or was written to, the list it is on, and its budget's end (from
	// submit, resends after W included). After a W: its slot and version,
	// the group that answered, and the pause before going there again.
	slot      uint32
	grp       *group
	lst       *list.List
	budgetEnd time.Duration
	seenW     bool
	paused    bool
	fetch     bool // the client's own ring fetch, answering no caller
	wrongSlot uint32
	wrongVer  uint64
	wrongGrp  *group
	pause     time.Duration
}

type reqHeap []*req

func (h reqHeap) Len() int            { return len(h) }
func (h reqHeap) Less(i, j int) bool  { return h[i].deadline < h[j].deadline }
func (h reqHeap) Swap(i, j int)       { h[i], h[j] = h[j], h[i]; h[i].hidx = i; h[j].hidx = j }
func (h *reqHeap) Push(x interface{}) { r := x.(*req); r.hidx = len(*h); *h = append(*h, r) }
func (h *reqHeap) Pop() interface{} {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	r.hidx = -1
	return r
}

type loop struct {
	c             *Client
	seed          *group   // the configured addresses
	groups        []*group // the seed first, then the ring's groups in use
	ring          *ring    // the ring routed by (nil: none yet)
	fetching      *req     // the ring fetch in progress
	ringWait      *list.List
	heap          reqHeap
	rng           *rand.Rand
	draining      bool
	drainDeadline time.Duration
	closing       bool // the loop is ending: a fetch that ends moves nobody
}

func (c *Client) now() time.Duration { return time.Since(c.t0) }

func (c *Client) logf(level int, format string, a ...interface{}) {
	if c.cfg.Logf != nil {
		c.cfg.Logf(level, fmt.Sprintf(format, a...))
	}
}

func (l *loop) init(c *Client) {
	l.c = c
	l.ringWait = list.New()
	var seed [8]byte
	cryptoRead(seed[:])
	s := int64(0)
	for _, b := range seed {
		s = s<<8 | int64(b)
	}
	l.rng = rand.New(rand.NewSource(s))
	l.seed = newGroup(c, "", c.addrs, true, 0)
	l.groups = []*group{l.seed}
	l.countConns()
}

// ---- the API side -----------------------------------------------------------

// do submits r and waits for its outcome, or for ctx.
func (c *Client) do(ctx context.Context, r *req) result {
	rel := r.typ == 'R'
	if rel {
		for {
			n := c.liveRel.Load()
			if n >= int64(c.cfg.ReleaseQueueMax) {
				return result{outcome: oQueueFull}
			}
			if c.liveRel.CompareAndSwap(n, n+1) {
				break
			}
		}
	} else if c.liveReq.Add(1) > int64(c.cfg.RequestsMax) {
		c.liveReq.Add(-1)
		return result{outcome: oUnavailable, reason: "requests_max"}
	}
	r.done = make(chan result, 1)
	r.hidx = -1
	r.submit = c.now()
	select {
	case c.submitCh <- r:
	case <-c.quit:
		c.unlive(r)
		return result{outcome: oCancelled, reason: "shutdown"}
	case <-ctx.Done():
		c.unlive(r)
		if rel {
			return result{outcome: oUnconfirmed, ctxErr: ctx.Err()}
		}
		return result{outcome: oCancelled, ctxErr: ctx.Err()}
	}
	select {
	case res := <-r.done:
		return res
	case <-c.quit:
		return c.afterQuit(r)
	case <-ctx.Done():
	}
	if rel { // the release goes on in the queue; the caller stops waiting
		return result{outcome: oUnconfirmed, ctxErr: ctx.Err()}
	}
	select {
	case c.cancelCh <- r:
	case res := <-r.done:
		return res
	case <-c.quit:
		return c.afterQuit(r)
	}
	select { // the loop decides every request it was given exactly once
	case res := <-r.done:
		if res.outcome == oCancelled || res.outcome == oIndeterminate {
			res.ctxErr = ctx.Err()
		}
		return res
	case <-c.quit:
		return c.afterQuit(r)
	}
}

func (c *Client) afterQuit(r *req) result {
	select {
	case res := <-r.done:
		return res
	default:
		// Only a request still in submitCh when the loop ended gets here;
		// the loop's last act frees those.
		return result{outcome: oCancelled, reason: "shutdown"}
	}
}

func (c *Client) unlive(r *req) {
	if r.fetch {
		return
	}
	if r.typ == 'R' {
		c.liveRel.Add(-1)
	} else {
		c.liveReq.Add(-1)
	}
}

// ---- outcomes -----------------------------------------------------------------

func (l *loop) decide(r *req, res result) {
	if r.decided {
		panic("ticketing: a request decided twice")
	}
	r.decided = true
	if r.fetch {
		l.fetchDone(r, res)
		return
	}
	if res.outcome == oIndeterminate {
		l.c.st.indet.Add(1)
	}
	if r.comp {
		lvl := 1
		if res.outcome == oReleased || res.outcome == oNotHeld {
			lvl = 2
		}
		l.c.logf(lvl, "compensation release of %s token %d: %v", r.key, r.token, res.outcome)
		return
	}
	r.done <- res
}

// free forgets a request that holds no connection.
func (l *loop) free(r *req) {
	l.heapRemove(r)
	l.unpend(r)
	l.c.unlive(r)
}

func (l *loop) finish(r *req, o outcome, reason string) {
	l.finishWith(r, result{outcome: o, reason: reason})
}

// finishWith decides r with res (a release's token and resent filled in)
// and lets it go.
func (l *loop) finishWith(r *req, res result) {
	if r.typ == 'R' {
		res.token, res.resent = r.token, r.resent
	}
	l.unpend(r)
	l.heapRemove(r)
	l.decide(r, res)
	l.c.unlive(r)
}

func (l *loop) unpend(r *req) {
	if r.elem != nil {
		r.lst.Remove(r.elem)
		r.elem, r.lst = nil, nil
	}
}

// repend puts r on the pending list of its group.
func (l *loop) repend(r *req, front bool) {
	r.lst = r.grp.pending
	if r.typ == 'R' {
		r.lst = r.grp.pendingRel
	}
	if front {
		r.elem = r.lst.PushFront(r)
	} else {
		r.elem = r.lst.PushBack(r)
	}
}

func (l *loop) heapSet(r *req, d time.Duration) {
	r.deadline = d
	if r.hidx >= 0 {
		heap.Fix(&l.heap, r.hidx)
	} else {
		heap.Push(&l.heap, r)
	}
}

func (l *loop) heapRemove(r *req) {
	if r.hidx >= 0 {
		heap.Remove(&l.heap, r.hidx)
	}
}

func maxDur(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

func (l *loop) accept(r *req) {
	c := l.c
	if l.draining && r.typ != 'R' {
		l.decide(r, result{outcome: oCancelled, reason: "shutdown"})
		c.unlive(r)
		return
	}
	r.budgetEnd = r.submit + budgetOf(r.typ, r.waitMs, &c.cfg)
	l.heapSet(r, r.budgetEnd)
	if r.typ == 'A' || r.typ == 'R' || r.typ == 'Q' {
		r.slot = Slot(r.key)
	}
	if r.grp == nil { // a compensation goes to the group that granted
		r.grp = l.route(r, c.now())
	}
	l.repend(r, false)
}

func (l *loop) compensate(r *req, token uint64) {
	c := l.c
	for {
		n := c.liveRel.Load()
		if n >= int64(c.cfg.ReleaseQueueMax) {
			c.st.compDropped.Add(1)
			c.logf(1, "late grant of %s token %d not released: release queue full (the lease will free it)", r.key, token)
			return
		}
		if c.liveRel.CompareAndSwap(n, n+1) {
			break
		}
	}
	c.st.comp.Add(1)
	c.logf(2, "late grant of %s token %d: releasing it", r.key, token)
	comp := &req{typ: 'R', key: r.key, token: token, comp: true, hidx: -1, submit: c.now(), grp: r.grp}
	l.accept(comp)
}

// grantTooLate: a G for a pending acquire at or after the lease deadline
// counted from its first write. The lease may be someone else's already, so
// the caller must not enter: INDETERMINATE with reason "lease", and the token
// is released at once as a known-token compensation.
func (l *loop) grantTooLate(r *req, token uint64) result {
	l.c.logf(1, "grant of %s token %d came after its lease had run out", r.key, token)
	l.compensate(r, token)
	return result{outcome: oIndeterminate, reason: "lease"}
}

// zombie keeps a decided request's id until its answer or the linger.
func (l *loop) zombie(r *req, now time.Duration) {
	until := now + zombieLinger
	if r.typ == 'A' && r.wire == wireSent {
		until += time.Duration(r.waitSentMs) * time.Millisecond
	}
	l.heapSet(r, until)
}

func (l *loop) onSent(r *req, at time.Duration) {
	r.wire = wireSent
	if r.everSent && r.typ == 'R' {
		r.resent = true
	}
	r.everSent = true
	r.sent = at
	l.c.st.written.Add(1)
	if !r.decided && r.typ == 'A' {
		l.heapSet(r, at+time.Duration(r.waitSentMs)*time.Millisecond+l.c.cfg.ResponseGrace)
	}
}

func fits(r *req, t byte) bool {
	if r.neutered {
		return t == 'E'
	}
	switch r.typ {
	case 'A':
		return t == 'G' || t == 'T' || t == 'B' || t == 'E' || t == 'W'
	case 'R':
		return t == 'R' || t == 'N' || t == 'E' || t == 'W'
	case 'Q':
		return t == 'Q' || t == 'E' || t == 'W'
	case 'S':
		return t == 'S' || t == 'E'
	}
	return t == 'P' || t == 'E'
}

// ringPart takes an S line for r: the whole answer (the parts' bodies
// joined by ";") once its last part came, done false while more are to
// come, ok false for a part out of order (1..n, the same n and version
// throughout), which is a protocol error.
func ringPart(r *req, rsp *response) (whole response, done, ok bool) {
	if rsp.parts == 1 {
		return *rsp, true, len(r.ringParts) == 0
	}
	if int(rsp.part) != len(r.ringParts)+1 ||
		(len(r.ringParts) > 0 && (rsp.parts != r.ringN || rsp.version != r.ringVer)) {
		return whole, false, false
	}
	r.ringParts = append(r.ringParts, rsp.text)
	r.ringN, r.ringVer = rsp.parts, rsp.version
	if rsp.part < rsp.parts {
		return whole, false, true
	}
	whole = *rsp
	whole.text = strings.Join(r.ringParts, ";")
	whole.part = 1
	r.ringParts = nil
	return whole, true, true
}

func (l *loop) onResponse(r *req, rsp *response, now time.Duration) {
	if r.decided {
		if r.typ == 'A' && rsp.typ == 'G' {
			l.compensate(r, rsp.token)
		}
		l.free(r)
		return
	}
	if rsp.typ == 'W' {
		// Definite: nothing was done. The request goes on by the ring
		// while its budget lasts (route.go).
		l.onWrong(r, rsp, now)
		return
	}
	var res result
	switch rsp.typ {
	case 'G':
		res.outcome, res.token = oAcquired, rsp.token
		// The lease counts from the commit; the first write is earlier.
		res.leaseEnd = r.sent + time.Duration(r.leaseMs)*time.Millisecond
		if now >= res.leaseEnd {
			res = l.grantTooLate(r, rsp.token)
		}
	case 'T':
		res.outcome = oTimeout
	case 'B':
		res.outcome = oBusy
	case 'R':
		res.outcome = oReleased
	case 'N':
		res.outcome = oNotHeld
	case 'Q':
		res.outcome, res.held, res.owner = oAnswered, rsp.token != 0, rsp.owner
		res.token, res.waiters = rsp.token, rsp.waiters
	case 'P':
		res.outcome = oAnswered
		if now > r.sent {
			res.rtt = now - r.sent
		}
	case 'S':
		res.outcome, res.ringVer, res.body = oAnswered, rsp.version, rsp.text
	default:
		res.outcome, res.reason = oInvalid, rsp.text
	}
	if r.typ == 'R' {
		res.token, res.resent = r.token, r.resent
	}
	l.heapRemove(r)
	l.decide(r, res)
	l.c.unlive(r)
}

// onConnLost: r was on a connection that died.
func (l *loop) onConnLost(r *req) {
	sent := r.wire == wireSent
	r.wire, r.conn = wireNone, nil
	switch {
	case r.decided: // a zombie: its answer is gone with the connection
		l.free(r)
	case !sent || r.typ != 'A':
		// Not one byte written: the same request may go elsewhere. A
		// written release or read is safe to repeat.
		r.neutered = false
		l.repend(r, true)
	default:
		// Written, no answer: nobody knows whether it was granted. Never
		// resent; an M or a close is no ground for it.
		l.finish(r, oIndeterminate, "")
	}
}

func (l *loop) expire(r *req, now time.Duration) {
	if r.decided { // a zombie's linger ended: forget its id
		r.conn.dropSlot(r)
		l.free(r)
		return
	}
	if r.paused { // its pause after a W ended: it goes again
		r.paused = false
		l.reroute(r, now, false)
		return
	}
	if r.wire == wireNone && r.seenW {
		l.finishWrong(r) // answered W, not written again within its budget
		return
	}
	if r.wire == wireQueued && !r.conn.canNeuter(r) {
		// Handed to a write that has not returned: it may be leaving right
		// now. Decide once the write says how far it got.
		l.heapSet(r, now+10*time.Millisecond)
		return
	}
	o := oUnavailable
	if r.typ == 'R' {
		o = oUnconfirmed
	} else if r.typ == 'A' && r.wire == wireSent {
		o = oIndeterminate
	}
	if r.wire == wireNone {
		l.finish(r, o, "")
		return
	}
	res := result{outcome: o}
	if r.wire == wireQueued {
		r.conn.neuter(r)
		if r.seenW { // its resend after a W never left
			res = result{outcome: oWrongGroup, slot: r.wrongSlot, ringVer: r.wrongVer}
		}
	}
	if r.typ == 'R' {
		res.token, res.resent = r.token, r.resent
	}
	l.decide(r, res)
	l.zombie(r, now)
}

// cancel: ctx of an acquire, query or ping ended. Not written: CANCELLED.
// An acquire that may have been written: INDETERMINATE, and a grant that
// still comes is released.
func (l *loop) cancel(r *req, now time.Duration) {
	if r.decided || r.typ == 'R' {
		return
	}
	if r.wire == wireNone {
		l.finish(r, oCancelled, "")
		return
	}
	o := oCancelled
	if r.wire == wireQueued && r.conn.canNeuter(r) {
		r.conn.neuter(r)
	} else if r.typ == 'A' {
		o = oIndeterminate
	}
	l.decide(r, result{outcome: o})
	l.zombie(r, now)
}

// ---- M hints ----------------------------------------------------------------------

// onMoved takes an M hint of group g (each group has its own leader).
func (l *loop) onMoved(g *group, addr string, now time.Duration) {
	c := l.c
	c.st.moved.Add(1)
	same := addr == g.hint
	g.hint = addr
	if g.seed {
		c.mu.Lock()
		c.leaderHint = addr
		c.mu.Unlock()
	}
	if addr == "" {
		g.leader = -1
		return
	}
	if !same {
		c.logf(2, "leader hint of %s: %s", g.label(), addr)
	}
	for i, k := range g.conns {
		if k.addr != addr {
			continue
		}
		g.leader = i
		if k.state == stRetired {
			k.state = stIdle
			k.backoff = c.cfg.BackoffMin
			k.nextAttempt = 1<<62 - 1
		}
		// Soon, but not sooner than the shortest backoff: two nodes naming
		// each other during an election must not make a tight loop.
		if k.state == stIdle && now+c.cfg.BackoffMin < k.nextAttempt {
			k.nextAttempt = now + c.cfg.BackoffMin
		}
		return
	}
	// A member we were not configured with: connect to it too.
	if _, _, err := splitAddr(addr); err != nil {
		c.logf(1, "cannot connect to hinted leader %s: %v", addr, err)
		return
	}
	slot := -1
	if len(g.conns) < g.nconfigured+extraMax {
		slot = len(g.conns)
		g.conns = append(g.conns, newConn(c, g, slot, addr, true))
		l.countConns()
	} else {
		for i := g.nconfigured; i < len(g.conns) && slot < 0; i++ {
			if g.conns[i].state == stRetired {
				slot = i
			}
		}
		for i := g.nconfigured; i < len(g.conns) && slot < 0; i++ {
			if g.conns[i].state != stReady {
				slot = i
			}
		}
		if slot < 0 {
			c.logf(1, "no room for a connection to hinted leader %s", addr)
			return
		}
		g.conns[slot].retire()
		g.conns[slot].setAddr(addr, now)
	}
	g.conns[slot].nextAttempt = now
	g.leader = slot
}

func (l *loop) readyChange(d int) {
	l.c.mu.Lock()
	l.c.ready += d
	l.c.mu.Unlock()
}

// ---- the loop ------------------------------------------------------------------------

func (g *group) pickConn() *conn {
	if g.leader >= 0 && g.conns[g.leader].hasRoom() {
		return g.conns[g.leader]
	}
	n := len(g.conns)
	for j := 0; j < n; j++ {
		i := (g.rr + j) % n
		if g.conns[i].hasRoom() {
			g.rr = (i + 1) % n
			return g.conns[i]
		}
	}
	return nil
}

func (l *loop) dispatch(now time.Duration) {
	for _, g := range l.groups {
	lists:
		for _, lst := range []*list.List{g.pendingRel, g.pending} {
			for lst.Len() > 0 {
				k := g.pickConn()
				if k == nil {
					break lists
				}
				r := lst.Remove(lst.Front()).(*req)
				r.elem, r.lst = nil, nil
				k.queue(r, now)
			}
		}
	}
}

// failTLSRefused: every connection of a group had its last attempt refused
// in TLS, a configuration error waiting will not fix; the group's unsent
// acquires, queries and pings end UNAVAILABLE "tls" now.
func (l *loop) failTLSRefused() {
	for _, g := range l.groups {
		l.failTLSRefusedIn(g)
	}
}

func (l *loop) failTLSRefusedIn(g *group) {
	if g.pending.Len() == 0 {
		return
	}
	live := 0
	for _, k := range g.conns {
		if k.state == stRetired {
			continue
		}
		if !k.tlsRefused {
			return
		}
		live++
	}
	if live == 0 {
		return
	}
	for g.pending.Len() > 0 {
		l.finish(g.pending.Front().Value.(*req), oUnavailable, "tls")
	}
}

// drainBegin (Close): acquires, queries and pings end CANCELLED wherever
// they are; releases go on until their deadline, and so does a ring fetch
// (a release answered W waits for it).
func (l *loop) drainBegin(now time.Duration) {
	l.draining = true
	l.drainDeadline = now + releaseDeadline*time.Millisecond
	cancel := func(lst *list.List) {
		for e := lst.Front(); e != nil; {
			r := e.Value.(*req)
			e = e.Next()
			if r.typ != 'R' && !r.fetch {
				l.finish(r, oCancelled, "shutdown")
			}
		}
	}
	for _, g := range l.groups {
		cancel(g.pending)
	}
	cancel(l.ringWait)
	var paused []*req
	for _, r := range l.heap {
		if r.paused && r.typ != 'R' {
			paused = append(paused, r)
		}
	}
	for _, r := range paused {
		l.finish(r, oCancelled, "shutdown")
	}
	for _, g := range l.groups {
		for _, k := range g.conns {
			for _, r := range k.slots {
				if !r.decided && r.typ != 'R' && !r.fetch {
					if r.wire == wireQueued && k.canNeuter(r) {
						k.neuter(r)
					}
					l.decide(r, result{outcome: oCancelled, reason: "shutdown"})
					l.zombie(r, now)
				}
			}
		}
	}
}

func (l *loop) runTimers(now time.Duration) {
	for _, g := range l.groups {
		for _, k := range g.conns {
			if k.state == stIdle && k.nextAttempt <= now {
				k.start(now)
			}
		}
	}
	for len(l.heap) > 0 && l.heap[0].deadline <= now {
		r := heap.Pop(&l.heap).(*req)
		l.expire(r, now)
	}
}

func (l *loop) nextWake(now time.Duration) time.Duration {
	next := time.Duration(1<<62 - 1)
	if len(l.heap) > 0 {
		next = l.heap[0].deadline
	}
	for _, g := range l.groups {
		for _, k := range g.conns {
			if k.state == stIdle && k.nextAttempt < next {
				next = k.nextAttempt
			}
		}
	}
	if l.draining && l.drainDeadline < next {
		next = l.drainDeadline
	}
	if next <= now {
		return 0
	}
	return next - now
}

// finishAtEnd decides a request still undecided when the loop ends.
func (l *loop) finishAtEnd(r *req) {
	if r.typ == 'R' {
		l.finish(r, oUnconfirmed, "")
	} else {
		l.finish(r, oCancelled, "shutdown")
	}
}

func (c *Client) run() {
	l := &c.lp
	timer := time.NewTimer(time.Hour)
	stop := c.stopCh
	now := c.now()
	for _, k := range l.seed.conns {
		k.nextAttempt = now
	}
	for {
		l.runTimers(now)
		l.dispatch(now)
		l.failTLSRefused()
		for _, g := range l.groups {
			for _, k := range g.conns {
				k.flush(now)
			}
		}
		if l.draining && (now >= l.drainDeadline || c.liveRel.Load() == 0) {
			break
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(l.nextWake(now))
		select {
		case r := <-c.submitCh:
			now = c.now()
			l.accept(r)
		case r := <-c.cancelCh:
			now = c.now()
			l.cancel(r, now)
		case ev := <-c.evCh:
			now = c.now()
			l.event(ev, now)
		case <-stop:
			stop = nil
			now = c.now()
			l.drainBegin(now)
		case <-timer.C:
			now = c.now()
		}
		// Connection events already waiting go first (select picks at
		// random among ready cases): a close the reader saw must take its
		// connection out before a new request is written to it.
		for more := true; more; {
			select {
			case ev := <-c.evCh:
				now = c.now()
				l.event(ev, now)
			default:
				more = false
			}
		}
	}
	// The end: every connection closed, every request decided (those
	// waiting for the ring fetch or paused after a W too).
	l.closing = true
	for _, g := range l.groups {
		for _, k := range g.conns {
			k.retire()
		}
	}
	for l.ringWait.Len() > 0 {
		l.finishAtEnd(l.ringWait.Front().Value.(*req))
	}
	for _, g := range l.groups {
		for g.pendingRel.Len() > 0 {
			l.finishAtEnd(g.pendingRel.Front().Value.(*req))
		}
		for g.pending.Len() > 0 {
			l.finishAtEnd(g.pending.Front().Value.(*req))
		}
	}
	for len(l.heap) > 0 {
		if r := l.heap[0]; r.decided {
			l.free(r)
		} else {
			l.finishAtEnd(r)
		}
	}
	close(c.quit)
	for {
		select {
		case r := <-c.submitCh:
			l.decide(r, result{outcome: oCancelled, reason: "shutdown"})
			c.unlive(r)
		default:
			return
		}
	}
}
