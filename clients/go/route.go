package ticketing

// Routing by key across groups (docs/client.md, "Groups and the ring";
// docs/protocol.md section 10). The client starts with the configured
// addresses, the seed group, and sends everything there until it knows a
// ring. A W answer makes it fetch the ring of the group that answered (one
// fetch at a time; requests answered W meanwhile wait for it), and it keeps
// the newer of that ring and its own. A keyed request goes to the group
// the ring names for its slot; each group has its own connection set, made
// on first use from the ring's addresses, with every rule of a single
// cluster (M hints, pipelining, reconnects, INDETERMINATE) held per group.
//
// After a W the request is sent again, a new request each time, while its
// budget lasts: at once when the ring now names another group, after a
// pause of 20 ms doubling to 200 ms when it names the group that answered
// W again (a move in progress). The outcome is WRONG_GROUP, with the last
// W's slot and version, when the budget ends or when the ring names no
// group for the slot.
//
// Everything here runs on the loop goroutine, except the pure functions
// the tests call directly.

import (
	"container/list"
	"errors"
	"fmt"
	"strings"
	"time"
)

const (
	ringGroupsMax = 64   // groups one ring names (and connection sets besides the seed)
	ringRangesMax = 1024 // ranges of one ring
	rangeAddrsMax = 5    // client addresses of one range
	ringAddrMax   = 128  // bytes of one address
	groupNameMax  = 64
	noGroup       = 0xff // ring.owner of a slot no range covers

	pauseFirst = 20 * time.Millisecond  // before the first resend to the same group
	pauseMax   = 200 * time.Millisecond // the pause doubles up to this
)

// ringGroup is one group a ring names: its name and its client addresses
// (those of all its ranges, in order, at most addrsMax).
type ringGroup struct {
	name  string
	addrs []string
}

// ring is a parsed ring: which group owns each slot.
type ring struct {
	version uint64
	groups  []ringGroup
	owner   [Slots]uint8 // index into groups, or noGroup
	// The loop's connection set of each group, made on first use; the
	// seed group's is the seed's from the start.
	sets []*group
}

func groupNameOK(s string) bool {
	return len(s) >= 1 && len(s) <= groupNameMax && visible(s) && !strings.ContainsAny(s, ";@")
}

// parseRing reads a ring body: ranges "<first>-<last>=<group>@<addr>[,...]"
// joined by ";" ("-": none), disjoint, within the ring's bounds. Any range
// it cannot read refuses the whole ring.
func parseRing(version uint64, body string) (*ring, error) {
	r := &ring{version: version}
	for i := range r.owner {
		r.owner[i] = noGroup
	}
	if version == 0 {
		return nil, errors.New("version 0 is no ring")
	}
	if body == "-" {
		return r, nil
	}
	ranges := strings.Split(body, ";")
	if len(ranges) > ringRangesMax {
		return nil, fmt.Errorf("%d ranges, at most %d", len(ranges), ringRangesMax)
	}
	for _, s := range ranges {
		bad := func(why string) (*ring, error) { return nil, fmt.Errorf("range %q: %s", s, why) }
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return bad("no '='")
		}
		dash := strings.IndexByte(s[:eq], '-')
		if dash < 0 {
			return bad("no '-'")
		}
		first, ok1 := parseU64(s[:dash])
		last, ok2 := parseU64(s[dash+1 : eq])
		if !ok1 || !ok2 || first > last || last >= Slots {
			return bad("slots")
		}
		at := strings.IndexByte(s[eq+1:], '@')
		if at < 0 {
			return bad("no '@'")
		}
		name, list := s[eq+1:eq+1+at], s[eq+2+at:]
		if !groupNameOK(name) {
			return bad("group name")
		}
		addrs := strings.Split(list, ",")
		if len(addrs) > rangeAddrsMax {
			return bad("too many addresses")
		}
		for _, a := range addrs {
			if len(a) > ringAddrMax {
				return bad("address too long")
			}
			if _, _, err := splitAddr(a); err != nil {
				return bad(err.Error())
			}
		}
		gi := -1
		for i := range r.groups {
			if r.groups[i].name == name {
				gi = i
			}
		}
		if gi < 0 {
			if len(r.groups) == ringGroupsMax {
				return bad(fmt.Sprintf("more than %d groups", ringGroupsMax))
			}
			r.groups = append(r.groups, ringGroup{name: name})
			gi = len(r.groups) - 1
		}
		g := &r.groups[gi]
		for _, a := range addrs {
			if len(g.addrs) < addrsMax && !hasAddr(g.addrs, a) {
				g.addrs = append(g.addrs, a)
			}
		}
		for slot := first; slot <= last; slot++ {
			if r.owner[slot] != noGroup {
				return bad("overlaps another range")
			}
			r.owner[slot] = uint8(gi)
		}
	}
	r.sets = make([]*group, len(r.groups))
	return r, nil
}

func hasAddr(list []string, a string) bool {
	for _, b := range list {
		if strings.EqualFold(a, b) { // host names compare without case
			return true
		}
	}
	return false
}

// seedIndex is the group of r that is the seed: the first whose addresses
// include one of the configured ones; -1 if none does.
func seedIndex(r *ring, configured []string) int {
	for i, g := range r.groups {
		for _, a := range g.addrs {
			if hasAddr(configured, a) {
				return i
			}
		}
	}
	return -1
}

// groupOf is the group r names for slot: its index, or -1 for none (no
// ring, or a slot no range covers).
func (r *ring) groupOf(slot uint32) int {
	if r == nil || slot >= Slots || r.owner[slot] == noGroup {
		return -1
	}
	return int(r.owner[slot])
}

// takeRing says whether a fetched ring of version ver replaces cur: only a
// newer one does, never an older one or the same again.
func takeRing(cur *ring, ver uint64) bool {
	return ver != 0 && (cur == nil || ver > cur.version)
}

// nextPause is the pause before a request goes again to the group that
// has just answered it W: 20 ms the first time, then doubling to 200 ms.
func nextPause(prev time.Duration) time.Duration {
	if prev < pauseFirst {
		return pauseFirst
	}
	if prev >= pauseMax/2 {
		return pauseMax
	}
	return prev * 2
}

// budgetOf is how long a request may go on from its submission, resends
// after W included: an acquire max(wait, SendBudgetMin), a release its
// absolute 5 s, a query, ping or ring RequestTimeout.
func budgetOf(typ byte, waitMs uint32, cfg *Config) time.Duration {
	switch typ {
	case 'A':
		return maxDur(time.Duration(waitMs)*time.Millisecond, cfg.SendBudgetMin)
	case 'R':
		return releaseDeadline * time.Millisecond
	}
	return cfg.RequestTimeout
}

// waitLeftMs is the wait an acquire sends at now: what is left of the
// caller's wait since submit (0 once it has run out). A request that
// waited for a connection, or was answered W and goes again, waits only
// for the rest.
func waitLeftMs(waitMs uint32, submit, now time.Duration) uint32 {
	spent := time.Duration(0)
	if now > submit {
		spent = now - submit
	}
	if spent >= time.Duration(waitMs)*time.Millisecond {
		return 0
	}
	return waitMs - uint32(spent/time.Millisecond)
}

// resendAt is when a request paused for the group that answered it W goes
// again: now + pause, or false when that is not before the budget's end
// (the outcome is then WRONG_GROUP at once).
func resendAt(now, pause, budgetEnd time.Duration) (time.Duration, bool) {
	at := now + pause
	return at, at < budgetEnd
}

// ---- connection sets ---------------------------------------------------------

// group is the connection set of one group: the seed's from the
// configured addresses, every other's from its ring addresses. Each keeps
// its own leader hint, round-robin and pending requests.
type group struct {
	name        string // the ring's name ("" for the seed until a ring names it)
	seed        bool
	addrs       []string
	conns       []*conn
	nconfigured int
	rr, leader  int
	hint        string // the last M hint ("" none)
	pendingRel  *list.List
	pending     *list.List
}

func newGroup(c *Client, name string, addrs []string, seed bool, now time.Duration) *group {
	g := &group{name: name, seed: seed, addrs: addrs, leader: -1,
		pendingRel: list.New(), pending: list.New()}
	if len(addrs) == 1 { // two connections to a single address, as the seed
		addrs = []string{addrs[0], addrs[0]}
	}
	for _, a := range addrs {
		k := newConn(c, g, len(g.conns), a, false)
		k.nextAttempt = now
		g.conns = append(g.conns, k)
	}
	g.nconfigured = len(g.conns)
	return g
}

func (g *group) label() string {
	switch {
	case g.seed && g.name == "":
		return "the seed group"
	case g.seed:
		return "group " + g.name + " (the seed)"
	}
	return "group " + g.name
}

// idle: nothing waits for it and no connection holds an id.
func (g *group) idle() bool {
	if g.pending.Len() > 0 || g.pendingRel.Len() > 0 {
		return false
	}
	for _, k := range g.conns {
		if len(k.slots) > 0 || k.writing {
			return false
		}
	}
	return true
}

func sameAddrs(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !strings.EqualFold(a[i], b[i]) {
			return false
		}
	}
	return true
}

func (l *loop) countConns() {
	n := 0
	for _, g := range l.groups {
		n += len(g.conns)
	}
	l.c.st.conns.Store(int64(n))
	l.c.st.groups.Store(int64(len(l.groups)))
}

// dropGroup closes an idle group's connections and forgets it (its name
// may come back in a later ring, with new connections).
func (l *loop) dropGroup(g *group) {
	for _, k := range g.conns {
		k.retire()
	}
	// A new slice: a ring taken while the loop ranges over the groups
	// (an answer decides a fetch) must not shift that range under it.
	kept := make([]*group, 0, len(l.groups))
	for _, h := range l.groups {
		if h != g {
			kept = append(kept, h)
		}
	}
	l.groups = kept
	l.countConns()
	l.c.logf(2, "%s: connections closed (not in the ring any more)", g.label())
}

// setOf is the connection set of the ring's group gi, made on its first
// use; nil when no room is left for another (more groups than a ring
// names can only be old groups still busy).
func (l *loop) setOf(gi int, now time.Duration) *group {
	r := l.ring
	if g := r.sets[gi]; g != nil {
		return g
	}
	rg := r.groups[gi]
	for _, g := range l.groups {
		if !g.seed && g.name == rg.name && sameAddrs(g.addrs, rg.addrs) {
			r.sets[gi] = g
			return g
		}
	}
	if len(l.groups) > ringGroupsMax { // the seed and 64 others
		l.pruneGroups()
		if len(l.groups) > ringGroupsMax {
			l.c.logf(1, "no room for the connections of group %s", rg.name)
			return nil
		}
	}
	g := newGroup(l.c, rg.name, rg.addrs, false, now)
	l.groups = append(l.groups, g)
	r.sets[gi] = g
	l.countConns()
	l.c.logf(2, "%s: connecting to %s", g.label(), strings.Join(rg.addrs, ","))
	return g
}

// pruneGroups drops the idle groups the ring no longer names with the same
// addresses.
func (l *loop) pruneGroups() {
	for _, g := range append([]*group(nil), l.groups...) {
		if g.seed || !g.idle() {
			continue
		}
		keep := false
		for i, rg := range l.ring.groups {
			keep = keep || (l.ring.sets[i] != l.seed && rg.name == g.name && sameAddrs(rg.addrs, g.addrs))
		}
		if !keep {
			l.dropGroup(g)
		}
	}
}

// installRing takes a fetched ring if it is newer than the client's.
func (l *loop) installRing(ver uint64, body string, from *group) {
	if !takeRing(l.ring, ver) {
		return
	}
	r, err := parseRing(ver, body)
	if err != nil {
		l.c.logf(1, "ring version %d from %s not taken: %v", ver, from.label(), err)
		return
	}
	if si := seedIndex(r, l.c.addrs); si >= 0 {
		r.sets[si] = l.seed
		l.seed.name = r.groups[si].name
	}
	// The sets of the groups this ring names as the old one did are found
	// again by setOf (same name, same addresses); the others go when idle.
	l.ring = r
	l.c.st.ringVer.Store(ver)
	l.pruneGroups()
	l.c.logf(2, "ring version %d from %s: %d groups", ver, from.label(), len(r.groups))
}

// route is the group a request goes to first: by the ring for a key, the
// seed without a ring, for a slot the ring gives nobody (the seed then
// judges it), and for ping and ring.
func (l *loop) route(r *req, now time.Duration) *group {
	if r.typ == 'A' || r.typ == 'R' || r.typ == 'Q' {
		if g, ok := l.ringSet(r.slot, now); ok {
			return g
		}
	}
	return l.seed
}

// ringSet is the connection set of the group the ring names for slot;
// false for none.
func (l *loop) ringSet(slot uint32, now time.Duration) (*group, bool) {
	gi := l.ring.groupOf(slot)
	if gi < 0 {
		return nil, false
	}
	g := l.setOf(gi, now)
	return g, g != nil
}

// ---- W and the resends ---------------------------------------------------------

// onWrong: r was answered W by its group. Definite: nothing was done, so r
// waits for the ring fetch (one at a time) and goes on from there.
func (l *loop) onWrong(r *req, rsp *response, now time.Duration) {
	r.seenW, r.wrongSlot, r.wrongVer, r.wrongGrp = true, rsp.slot, rsp.version, r.grp
	// The W'd write released nothing: only writes that may have acted
	// make a later N ambiguous (resent).
	r.everSent = false
	if now >= r.budgetEnd {
		l.finishWrong(r)
		return
	}
	l.heapSet(r, r.budgetEnd)
	r.lst, r.elem = l.ringWait, l.ringWait.PushBack(r)
	if l.fetching == nil {
		l.startFetch(r.grp, now)
	}
}

// startFetch asks g for its ring: a read of its own, ahead of g's other
// requests, within RequestTimeout.
func (l *loop) startFetch(g *group, now time.Duration) {
	f := &req{typ: 'S', fetch: true, hidx: -1, submit: now, grp: g}
	l.fetching = f
	l.heapSet(f, now+l.c.cfg.RequestTimeout)
	l.repend(f, true)
}

// fetchDone: the ring fetch ended (answered or not); the requests that
// waited for it go on by the ring the client has now.
func (l *loop) fetchDone(f *req, res result) {
	if l.fetching == f {
		l.fetching = nil
	}
	if res.outcome == oAnswered {
		l.installRing(res.ringVer, res.body, f.grp)
	} else {
		l.c.logf(1, "ring fetch from %s: %v %s", f.grp.label(), res.outcome, res.reason)
	}
	if l.closing {
		return
	}
	now := l.c.now()
	for l.ringWait.Len() > 0 {
		r := l.ringWait.Front().Value.(*req)
		l.unpend(r)
		l.reroute(r, now, true)
	}
}

// reroute sends r again after its W, by the ring: at once to another
// group; to the group that answered W only after a pause when mayPause
// (the pause ended otherwise). WRONG_GROUP when the ring names no group
// for the slot or the budget ends first.
func (l *loop) reroute(r *req, now time.Duration, mayPause bool) {
	g, ok := l.ringSet(r.slot, now)
	if !ok || now >= r.budgetEnd {
		l.finishWrong(r)
		return
	}
	if g == r.wrongGrp && mayPause {
		r.pause = nextPause(r.pause)
		at, ok := resendAt(now, r.pause, r.budgetEnd)
		if !ok {
			l.finishWrong(r)
			return
		}
		r.paused = true
		l.heapSet(r, at)
		return
	}
	if g != r.wrongGrp {
		r.pause = 0
	}
	l.c.st.rerouted.Add(1)
	r.grp, r.neutered = g, false
	l.heapSet(r, r.budgetEnd)
	l.repend(r, true)
}

// finishWrong ends r WRONG_GROUP with its last W's slot and version.
func (l *loop) finishWrong(r *req) {
	l.finishWith(r, result{outcome: oWrongGroup, slot: r.wrongSlot, ringVer: r.wrongVer})
}
