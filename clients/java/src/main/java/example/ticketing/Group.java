package example.ticketing;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;

/**
 * One group's set of connections, owned by the I/O thread: the seed (the
 * configured addresses) or a group the ring names, made on its first use
 * from the ring's addresses with the seed's secret, owner, TLS and knobs.
 * Every rule of one cluster holds per group: one connection per address
 * (two for a single address), the leader first and then round-robin, the
 * {@code M} hint remembered and followed (up to {@link Engine#EXTRA_MAX}
 * connections to members it was not told about), and its own queues of
 * requests not yet put on a connection.
 */
final class Group {
    private final Engine core;
    /** The ring's name for it; null for the seed while no ring names it. */
    String name;
    final boolean seed;
    final List<Conn> conns = new ArrayList<>();
    private final int nconfigured;
    private int rr;
    Conn leader;
    /** The last M hint of this group, "" if none. */
    private String hint = "";
    final ArrayDeque<Req> pendingRel = new ArrayDeque<>();
    final ArrayDeque<Req> pending = new ArrayDeque<>();
    /** No longer in the ring: takes nothing new, and goes once nothing is in flight on it. */
    boolean orphan;

    Group(Engine core, String name, List<Addr> addrs, boolean seed) {
        this.core = core;
        this.name = name;
        this.seed = seed;
        for (Addr a : addrs) {
            conns.add(new Conn(core, this, a, false));
        }
        if (addrs.size() == 1) {
            conns.add(new Conn(core, this, addrs.get(0), false));
        }
        for (int i = 0; i < conns.size(); i++) {
            conns.get(i).index = i;
        }
        nconfigured = conns.size();
    }

    /** Its connections make their first attempt at now. */
    void start(long now) {
        for (Conn k : conns) {
            k.nextAttempt = now;
        }
    }

    /** For the log: "group NAME", or "the seed group". */
    String label() {
        return name == null ? "the seed group" : "group " + name;
    }

    Conn pickConn() {
        if (leader != null && leader.hasRoom()) {
            return leader;
        }
        int n = conns.size();
        for (int j = 0; j < n; j++) {
            int i = (rr + j) % n;
            if (conns.get(i).hasRoom()) {
                rr = (i + 1) % n;
                return conns.get(i);
            }
        }
        return null;
    }

    boolean tlsRefusedAll() {
        boolean any = false;
        for (Conn k : conns) {
            if (k.state == Conn.RETIRED) {
                continue;
            }
            if (!k.tlsRefused) {
                return false;
            }
            any = true;
        }
        return any;
    }

    /** Nothing queued here and nothing in flight on its connections (zombies included). */
    boolean idle() {
        if (!pending.isEmpty() || !pendingRel.isEmpty()) {
            return false;
        }
        for (Conn k : conns) {
            if (!k.slots.isEmpty()) {
                return false;
            }
        }
        return true;
    }

    void retire() {
        for (Conn k : conns) {
            k.retire();
        }
    }

    // ---- M hints -------------------------------------------------------------------------

    void onMoved(String addr, long now) {
        core.noteMoved(addr);
        String a = addr == null ? "" : addr;
        boolean same = a.equals(hint);
        hint = a;
        if (addr == null) {
            leader = null; // "M -": no leader known now
            return;
        }
        if (!same) {
            core.log(2, label() + ": leader hint: " + addr);
        }
        for (Conn k : conns) {
            if (k.addr.text.equals(addr)) {
                leader = k;
                if (k.state == Conn.RETIRED) {
                    k.state = Conn.IDLE;
                    k.backoffNanos = core.cfg.backoffMinNanos;
                    k.nextAttempt = Long.MAX_VALUE;
                }
                // Soon, but not sooner than the shortest backoff: two nodes
                // naming each other during an election make no tight loop.
                if (k.state == Conn.IDLE) {
                    k.nextAttempt = Math.min(k.nextAttempt, now + core.cfg.backoffMinNanos);
                }
                return;
            }
        }
        // A member we were not told about: connect to it too.
        Addr parsed = Addr.parseOrNull(addr);
        if (parsed == null) {
            core.log(1, "cannot connect to hinted leader " + addr + " (bad address)");
            return;
        }
        if (conns.size() < nconfigured + Engine.EXTRA_MAX) {
            Conn k = new Conn(core, this, parsed, true);
            k.index = conns.size();
            k.nextAttempt = now;
            conns.add(k);
            core.recount();
            leader = k;
            return;
        }
        Conn slot = null;
        for (int i = nconfigured; i < conns.size() && slot == null; i++) {
            if (conns.get(i).state == Conn.RETIRED) {
                slot = conns.get(i);
            }
        }
        for (int i = nconfigured; i < conns.size() && slot == null; i++) {
            if (conns.get(i).state != Conn.READY) {
                slot = conns.get(i);
            }
        }
        if (slot == null) {
            core.log(1, "no room for a connection to hinted leader " + addr);
            return;
        }
        slot.retire();
        slot.addr = parsed;
        slot.state = Conn.IDLE;
        slot.backoffNanos = core.cfg.backoffMinNanos;
        slot.nextAttempt = now;
        leader = slot;
    }
}
