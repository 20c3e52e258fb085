/* Internal layout of the lock table, shared by shard/lock*.c only.
 *
 * Memory layout (the per-key cost is what matters at 10^6-10^7 keys):
 *
 *  - One allocation per key: struct lock_key (48 bytes on LP64, asserted
 *    below) followed by the key bytes and then the holder's owner bytes,
 *    inline. The owner area has a capacity (owner_cap) rounded so that the
 *    allocation is a multiple of 16 bytes, which is also jemalloc's class
 *    spacing up to 128 bytes: a 16-byte key with an 8-byte owner takes
 *    48 + 24 = 72, rounded to 80, jemalloc's 80-byte class. A later holder
 *    with a longer owner reallocates the key (lock_key_fit_owner) and every
 *    pointer to it is fixed up.
 *  - Leader-only state in a second allocation, struct lock_lead (64 bytes:
 *    the waiter and deferred FIFOs, the requesters of the proposal in
 *    flight and the grant's arrival time for the latency metrics, the waiter
 *    count, the in-flight index), that exists only while
 *    the key has a proposal in flight, waiters or deferred requests; k->lead
 *    is NULL otherwise, so an idle held key (the common case at scale, and
 *    every key on a follower) pays 8 bytes for it, not 64. The price is one
 *    malloc/free pair per proposal on an idle key.
 *  - Key index: chained hash table, 8-byte bucket heads, load factor between
 *    1/2 and 1 (incremental rehash, below), the chain link inside the key.
 *  - Lease timer: one 16-byte heap entry per held key (timer.h), room
 *    reserved when the key is created.
 *  - In flight: an array of key pointers (swap-remove) with room for every
 *    lead, reserved when the lead is allocated: 8..16 bytes per key that has
 *    leader state, nothing for an idle key. Every key in flight has a lead,
 *    so marking a key in flight never allocates. Inside tk_lock_apply() the
 *    key being applied was in flight and keeps its lead until its next step
 *    is decided, so apply allocates nothing for leader state. A lease that
 *    runs out on an idle key (tk_lock_tick()) allocates the lead for its
 *    EXPIRE; out of memory there panics, like out of memory in apply: the
 *    holder must be expired and a leader that cannot propose it must go.
 *    (So leases running out together on many idle keys cost a lead each
 *    until their EXPIREs commit: bounded by keys_max, given back after.)
 *  So a held idle key with an 18-byte key and a 9-byte owner costs
 *  80 (allocation; 96 with glibc's 8-byte header) + 8..16 (bucket) + 16..32
 *  (heap) bytes: tests/unit/test_lock_mem.c measures 121 bytes per key (103
 *  beyond the key bytes) with glibc malloc at 10^6 keys, on a follower and
 *  on a leader alike (it was 178 with a 96-byte struct and room for every
 *  key in the in-flight array). In ticketingd (jemalloc) a standalone node
 *  holding 10^6 16-byte keys grows by 170 bytes per key, 154 beyond the key:
 *  about 106 for the table and 48 for the grant in the in-memory Raft log.
 *
 *  - One allocation per waiter or deferred request: struct lock_req (96
 *    bytes, 16 of them the arrival and queueing times the latency metrics
 *    need) plus the owner bytes. It sits on two rings: its key's FIFO
 *    (waiters or deferred) and its client's ring, whose head is found through
 *    an open-addressing index by client (so closing a connection costs only
 *    that client's requests). A waiter also has a 16-byte wait-heap entry;
 *    the first waiter of an idle key also brings the key's lead.
 *
 * Rings are circular and doubly linked with one head pointer: head->prev is
 * the tail, so FIFO append, pop and removal from the middle are all O(1).
 */
#ifndef TK_SHARD_LOCK_INTERNAL_H
#define TK_SHARD_LOCK_INTERNAL_H

#include "shard/lock.h"
#include "shard/timer.h"

#define LOCK_NONE UINT32_MAX
/* k->flight holds the type of the command in flight; this bit marks a
 * HANDOFF proposed because the old holder's lease ran out. */
#define LOCK_FLIGHT_EXPIRED 0x80u
#define LOCK_FLIGHT_TYPE(f) ((uint8_t)((f)&0x7fu)) /* 7 bits: fits */

struct lock_req;

/* Leader-only state of a key (see above): exists iff the key has a
 * proposal in flight (k->flight != 0), waiters or deferred requests. */
struct lock_lead {
    struct lock_req *waiters;  /* FIFO of queued acquires */
    struct lock_req *deferred; /* R/Q waiting behind the proposal in flight */
    uint64_t grant_client;     /* who gets G when the proposal commits; 0 none */
    uint64_t grant_id;
    uint64_t grant_arrived_us; /* the granted request's arrived_us (metrics) */
    uint64_t release_client;   /* who gets R when the proposal commits; 0 none */
    uint64_t release_id;
    uint32_t nwaiters;    /* length of the waiters ring */
    uint32_t flight_slot; /* index in the in-flight array, LOCK_NONE if none */
};

struct lock_key {
    struct lock_key *next;  /* hash chain */
    uint64_t token;         /* committed holder's token; 0 = FREE */
    uint64_t lease_due_us;  /* holder's lease deadline (apply time + lease [+ margin]) */
    struct lock_lead *lead; /* leader-only state, NULL while idle (always on a follower) */
    uint32_t hash;          /* low 32 bits of tk_hash(key) */
    uint32_t lease_ms : 31; /* holder's lease (<= 250,000: fits) */
    uint32_t cut_mark : 1;  /* == t->cut.mark: listed by the running cut, or new since */
    uint32_t lease_slot;    /* back-index into the lease heap, LOCK_NONE if none */
    uint8_t key_len;
    uint8_t owner_len; /* 0 when FREE */
    uint8_t owner_cap; /* bytes reserved for the owner after the key */
    uint8_t flight;    /* leader: enum tk_cmd_type in flight (| EXPIRED), 0 none */
    char bytes[];      /* key_len key bytes, then owner_cap owner bytes */
};

#if UINTPTR_MAX == UINT64_MAX
/* The per-key budget above depends on these sizes; a new field should be
 * weighed against it (an idle held key pays for every byte of lock_key). */
_Static_assert(sizeof(struct lock_key) == 48, "struct lock_key grew: see the layout comment");
_Static_assert(sizeof(struct lock_lead) == 64, "struct lock_lead grew: see the layout comment");
#endif

static inline const char *lock_key_owner(const struct lock_key *k)
{
    return k->bytes + k->key_len;
}

struct lock_req {
    struct lock_req *prev, *next;   /* the key's waiter or deferred ring */
    struct lock_req *cprev, *cnext; /* the client's ring */
    struct lock_key *key;
    uint64_t client;
    uint64_t id;
    uint64_t token;      /* R */
    uint64_t arrived_us; /* A: the request's arrived_us */
    uint64_t queued_us;  /* A: when it was queued (the table's clock) */
    uint32_t wait_slot;  /* A: back-index into the wait heap */
    uint32_t lease_ms;   /* A */
    char type;           /* 'A' waiter; 'R' or 'Q' deferred */
    uint8_t owner_len;   /* A, R */
    char owner[];
};

/* A snapshot cut in progress (lock.h): its cursor over the key index and
 * what it has listed, against what it must list. */
struct lock_cut {
    bool running;
    uint8_t mark; /* keys whose cut_mark equals this are listed (or new) */
    int arr;      /* cursor: ht[arr], bucket `bucket` next */
    uint64_t bucket;
    uint64_t begin_us;
    struct tk_lock_cut_size want, done;
    tk_lock_cut_fn fn;
    void *ctx;
};

/* One bucket array of the key index. */
struct lock_ht {
    struct lock_key **b;
    uint64_t size; /* power of two, or 0 when unused */
    uint64_t used;
};

/* Open-addressing (linear probing) index: client -> head of its ring. */
struct lock_client {
    uint64_t client; /* 0 = empty slot */
    struct lock_req *head;
};

struct lock_clients {
    struct lock_client *v;
    uint64_t cap; /* power of two, or 0 */
    uint64_t used;
};

struct tk_lock_table {
    struct tk_lock_limits limits;
    bool leader;
    /* Key index: ht[0], and ht[1] while an incremental rehash moves buckets
     * from ht[0] (those below `rehash` are already moved). */
    struct lock_ht ht[2];
    int64_t rehash; /* -1 when not rehashing */
    uint64_t nkeys;
    uint64_t size_floor;         /* set by lock_keys_presize(): no shrink below it */
    struct tk_timer_heap leases; /* every held key not being expired on the leader */
    struct tk_timer_heap waits;  /* leader: every waiter */
    struct lock_key **flight;    /* leader: keys with a proposal in flight */
    uint64_t nflight;
    uint64_t flight_cap; /* >= nleads: marking a key in flight never allocates */
    uint64_t nleads;     /* keys with a struct lock_lead */
    struct lock_clients clients;
    uint64_t nheld;
    uint64_t nwaiters;
    uint64_t ndeferred;
    uint64_t held_bytes; /* key_len + owner_len of every held key */
    uint64_t max_token;  /* largest token applied since the last clear */
    /* Committed holders per slot (SPEC 15): a move hands slots over only
     * once they hold nothing, and /status shows keys held per range. */
    uint32_t slot_held[TK_SLOTS];
    struct lock_cut cut;
    struct tk_lock_stats counters; /* the cumulative fields only */
};

/* Key index and key memory (lock_keys.c). */
uint32_t lock_hash(const char *key, size_t key_len);
struct lock_key *lock_key_find(struct tk_lock_table *t,
                               uint32_t hash,
                               const char *key,
                               size_t key_len);
/* Allocates and indexes a new key with room for an owner of owner_len bytes,
 * reserving lease-heap room for it. NULL when out of memory. */
struct lock_key *lock_key_new(struct tk_lock_table *t,
                              uint32_t hash,
                              const char *key,
                              size_t key_len,
                              size_t owner_len);
/* Makes room for an owner of owner_len bytes; may move the key (returns the
 * new address, or NULL when out of memory, the key unchanged). */
struct lock_key *lock_key_fit_owner(struct tk_lock_table *t, struct lock_key *k, size_t owner_len);
/* Unindexes and frees a key that holds nothing (no holder, no lead). */
void lock_key_free(struct tk_lock_table *t, struct lock_key *k);
/* Gives k a lead (if it has none), with room for it in the in-flight array.
 * Returns the lead, or NULL when out of memory (nothing changed). */
struct lock_lead *lock_lead_get(struct tk_lock_table *t, struct lock_key *k);
/* Frees k's lead, which must be idle (nothing in flight, no waiters or
 * deferred requests). */
void lock_lead_free(struct tk_lock_table *t, struct lock_key *k);
/* Frees every key and the index (destroy and clear). */
void lock_keys_free_all(struct tk_lock_table *t);
void lock_keys_init(struct tk_lock_table *t);
/* What is left of k's lease at now_us, as a snapshot carries it (lock.h). */
uint32_t lock_key_left_ms(const struct lock_key *k, uint64_t now_us, uint64_t drift_us);
/* The running cut lists k now if it has not yet (and marks it listed). */
void lock_cut_visit(struct tk_lock_table *t, struct lock_key *k);
/* An empty table about to get n keys at once (a snapshot install): the
 * key index and the lease heap are sized for them, so the install does
 * not rehash its way up. Does nothing to a table with keys. */
void lock_keys_presize(struct tk_lock_table *t, uint64_t n);
/* Calls fn for each key; fn must not add or remove keys. */
void lock_keys_each(const struct tk_lock_table *t,
                    void (*fn)(void *ctx, struct lock_key *k),
                    void *ctx);

/* Client index (lock_keys.c). */
struct lock_client *lock_client_find(struct lock_clients *c, uint64_t client);
/* Makes room for one more client. TK_OK or TK_ENOMEM. */
int lock_clients_reserve(struct lock_clients *c);
/* Adds r at the tail of its client's ring (room reserved). */
void lock_client_add(struct lock_clients *c, struct lock_req *r);
/* Unlinks r from its client's ring. */
void lock_client_remove(struct lock_clients *c, struct lock_req *r);
/* Removes a whole entry (its ring already emptied by the caller). */
void lock_client_delete(struct lock_clients *c, struct lock_client *e);
void lock_clients_fini(struct lock_clients *c);

/* Rings (lock.c). */
void lock_ring_append(struct lock_req **head, struct lock_req *r);
void lock_ring_remove(struct lock_req **head, struct lock_req *r);

#endif
