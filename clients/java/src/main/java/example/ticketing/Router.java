package example.ticketing;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Routing by key over groups (docs/client.md, "Groups and the ring"),
 * owned by the I/O thread of the {@link Engine} it belongs to.
 *
 * <p>The configured addresses are the seed {@link Group}; until a ring is
 * known everything goes there, as with one cluster. A {@code W} makes the
 * client fetch the ring ({@code S}) from the group that answered, one fetch
 * at a time (a {@code W} during a fetch brings one more after it), and it
 * keeps the newer ring only. Each request with a key goes to the group the
 * ring names for the key's slot; each group named gets its own connections
 * on first use, from the ring's addresses (the group with a configured
 * address is the seed itself). A request answered {@code W} is definite
 * (nothing was done), so it goes again to the group the ring now names: at
 * once if that is another group, after a pause ({@link Resend}) if it is
 * the same one, while its budget lasts; then, or at once when the ring
 * names no group for the slot, it ends {@code WRONG_GROUP}. A resent
 * request is a new request for every other rule: its lease counts from its
 * own first write, and a written acquire that loses its connection is
 * INDETERMINATE as always.
 *
 * <p>Bounds: the ring's own (64 groups, 5 addresses each), the seed, and at
 * most 64 groups a newer ring dropped while requests were still in flight
 * on them.
 */
final class Router {
    private final Engine core;
    final Group seed;
    /** The seed first, then each group made since (the ring's, and orphans draining). */
    final List<Group> groups = new ArrayList<>();
    /** Requests answered W that wait for the fetch or for their pause. */
    final Set<Req> parked = new LinkedHashSet<>();
    /** Requests sent again after a W (read by any thread). */
    final AtomicLong rerouted = new AtomicLong();
    /** The version of the ring routed by, unsigned, 0 for none (read by any thread). */
    private volatile long ringVersion;
    /** The groups of the current ring by name, the seed under its ring name if it has one. */
    private Map<String, Group> byName = new HashMap<>();
    /** The ring routed by; null until one is fetched. */
    private RingTable ring;
    /** The ring fetch in progress, or null. */
    private Req fetching;
    /** The group of a W answered during that fetch: the next fetch asks it. */
    private Group fetchNext;
    /** Set by the engine's final sweep: nothing is routed again. */
    boolean stopped;

    Router(Engine core, List<Addr> configured) {
        this.core = core;
        seed = new Group(core, null, configured, true);
        groups.add(seed);
    }

    long ringVersion() {
        return ringVersion;
    }

    /**
     * The group a request goes to: the one the ring names for its key's
     * slot; the seed for pings, the caller's ring requests, and every key
     * while no ring is known or no range covers its slot (the seed then
     * answers W, which tells whether a newer ring exists). A ring fetch goes
     * to the group it was made for.
     */
    Group route(Req r) {
        if (r.fetch) {
            return r.group;
        }
        if (ring == null || r.type == 'P' || r.type == 'S') {
            return seed;
        }
        int gi = ring.groupOf(r.slot);
        return gi < 0 ? seed : groupAt(gi);
    }

    /** The group of the ring's index gi, its connections made on its first use. */
    private Group groupAt(int gi) {
        String name = ring.names.get(gi);
        Group g = byName.get(name);
        if (g == null) {
            g = new Group(core, name, ring.addrs.get(gi), false);
            g.start(Engine.now());
            groups.add(g);
            byName.put(name, g);
            core.recount();
            core.log(2, "group " + name + ": connecting to " + ring.addrs.get(gi));
        }
        return g;
    }

    /**
     * r (an acquire, release or query) was answered W: nothing was done, so
     * it may go again, once the client has asked the group that answered
     * for its ring. It waits for that fetch (or for the one in progress,
     * after which the client asks once more) and then goes by the ring.
     */
    void onWrong(Req r, Proto.Response rsp, long now) {
        r.wrong = true;
        r.wrongSlot = rsp.slot;
        r.wrongVersion = rsp.version;
        r.wrongGroup = r.group;
        if (r.type == 'R') {
            r.everSent = false; // this write released nothing: the next one is no resend of it
        }
        core.heapSet(r, r.budgetEnd); // a written acquire had the response grace instead
        if (fetching == null) {
            startFetch(r.group, now);
        } else {
            fetchNext = r.group;
        }
        park(r, Req.PARK_RING);
    }

    private void startFetch(Group from, long now) {
        Req f = new Req('S', "", 0, 0, 0);
        f.fetch = true;
        f.submitNanos = now;
        f.group = from;
        f.budgetEnd = now + core.cfg.requestTimeoutNanos;
        core.heapSet(f, f.budgetEnd);
        core.repend(f, false);
        fetching = f;
        core.log(3, "asking " + from.label() + " for its ring");
    }

    /**
     * The ring fetch ended: a newer ring that parses is the one routed by
     * from now on; then every request that waited for it goes again, and if
     * a W came meanwhile the client asks again (the requests it brought
     * went by this ring already: none waits for two fetches).
     */
    void ringFetched(Req f, Result res) {
        if (fetching != f) {
            return; // not the fetch in progress (there is one at a time)
        }
        fetching = null;
        if (stopped) {
            return;
        }
        String from = f.group.label();
        if (res.outcome != Outcome.ANSWERED) {
            core.log(1, "ring fetch from " + from + ": " + res.outcome + " " + res.reason);
        } else if (RingTable.newer(res.ringVersion, ringVersion)) {
            try {
                installRing(RingTable.parse(res.ringVersion, res.body));
            } catch (IllegalArgumentException e) {
                core.log(1, "ring version " + Long.toUnsignedString(res.ringVersion) + " from " + from
                        + " refused: " + e.getMessage());
            }
        }
        long now = Engine.now();
        for (Req r : new ArrayList<>(parked)) {
            if (r.park == Req.PARK_RING) {
                unpark(r);
                reroute(r, now);
            }
        }
        Group again = fetchNext;
        fetchNext = null;
        if (again != null && fetching == null && groups.contains(again)) { // not a group closed since
            startFetch(again, now);
        }
    }

    private void installRing(RingTable t) {
        ring = t;
        ringVersion = t.version;
        int s = t.groupWithAnyOf(core.cfg.addrs);
        seed.name = s >= 0 ? t.names.get(s) : null;
        Map<String, Group> next = new HashMap<>();
        if (seed.name != null) {
            next.put(seed.name, seed);
        }
        for (Group g : groups) {
            if (g == seed) {
                continue;
            }
            if (!g.orphan && t.names.contains(g.name) && !next.containsKey(g.name)) {
                next.put(g.name, g);
            } else {
                g.orphan = true; // what is in flight there is answered there
            }
        }
        byName = next;
        core.log(2, "routing by ring version " + Long.toUnsignedString(t.version) + " (" + t.names.size()
                + " groups; the seed is " + (seed.name == null ? "in none of them" : "group " + seed.name) + ")");
        // Requests not written yet go where the new ring says.
        List<Req> moving = new ArrayList<>();
        for (Group g : groups) {
            moving.addAll(g.pendingRel);
            moving.addAll(g.pending);
            g.pendingRel.clear();
            g.pending.clear();
        }
        for (Req r : moving) {
            r.group = route(r);
            core.repend(r, false);
        }
    }

    /**
     * Sends r (answered W) again by the ring: at once to another group; to
     * the same group after the next pause, or while the client still lacks
     * the ring the W was judged by (two groups must not bounce a request
     * between them at full speed); WRONG_GROUP when the ring names no group
     * for the slot, or the pause would end past the budget.
     */
    private void reroute(Req r, long now) {
        int gi = ring == null ? -1 : ring.groupOf(r.slot);
        if (gi < 0 || !Resend.within(now, r.budgetEnd)) {
            core.finish(r, Engine.wrongResult(r));
            return;
        }
        Group g = groupAt(gi);
        if (g != r.wrongGroup && !RingTable.newer(r.wrongVersion, ringVersion)) {
            r.pauseNanos = 0;
            resend(r, g);
            return;
        }
        r.pauseNanos = Resend.nextPauseNanos(r.pauseNanos);
        long at = now + r.pauseNanos;
        if (!Resend.within(at, r.budgetEnd)) {
            core.finish(r, Engine.wrongResult(r));
            return;
        }
        park(r, Req.PARK_PAUSE);
        core.heapSet(r, at);
    }

    /** The pause of r ended: it goes to the group the ring names now. */
    void afterPause(Req r) {
        int gi = ring == null ? -1 : ring.groupOf(r.slot);
        if (gi < 0) {
            core.finish(r, Engine.wrongResult(r));
            return;
        }
        resend(r, groupAt(gi));
    }

    private void resend(Req r, Group g) {
        rerouted.incrementAndGet();
        core.log(3, r.type + " " + r.key + ": sent again to " + g.label() + " after W");
        r.group = g;
        core.repend(r, false);
    }

    private void park(Req r, int how) {
        r.park = how;
        parked.add(r);
    }

    void unpark(Req r) {
        if (r.park != Req.PARK_NONE) {
            r.park = Req.PARK_NONE;
            parked.remove(r);
        }
    }

    /**
     * Groups the ring no longer names go once nothing is in flight on them.
     * At most {@link RingTable#GROUPS_MAX} of them are kept waiting so (with
     * the ring's own 64 and the seed, the client's bound on groups): past
     * that the oldest goes at once, as a lost connection goes (a written
     * acquire there is INDETERMINATE, anything else is sent again by the
     * ring).
     */
    void sweepOrphans() {
        int orphans = 0;
        for (int i = groups.size() - 1; i > 0; i--) {
            Group g = groups.get(i);
            if (!g.orphan) {
                continue;
            }
            if (g.idle()) {
                dropGroup(g, "not in the ring any more, connections closed");
            } else {
                orphans++;
            }
        }
        for (int i = 1; i < groups.size() && orphans > RingTable.GROUPS_MAX; i++) {
            Group g = groups.get(i);
            if (g.orphan) {
                dropGroup(g, "not in the ring any more, closed with requests in flight (too many such groups)");
                orphans--;
                i--;
            }
        }
    }

    private void dropGroup(Group g, String why) {
        g.retire();
        groups.remove(g);
        core.recount();
        core.log(2, g.label() + ": " + why);
        if (fetching != null && fetching.group == g) { // its queue goes with it
            core.finish(fetching, Outcome.UNAVAILABLE, "");
        }
    }
}
