/* The output buffers of one step: messages, the entries inside Append
 * messages, and resolved read barriers.
 *
 * They grow as needed and are reused from step to step; an update points
 * into them until the next step resets them. Append messages first record
 * an offset into the entry array, which may move while it grows, and get
 * their pointers once the step is over (raft_out_finish). A message that
 * cannot be allocated is dropped: Raft is built to survive lost messages.
 * Read results cannot be dropped, so their array is sized at creation for
 * every barrier that can be pending.
 */
#include "raft/internal.h"

#include <stdlib.h>
#include <string.h>

void raft_out_reset(struct raft_out *o)
{
    o->n_msgs = 0;
    o->n_ents = 0;
    o->n_reads = 0;
}

void raft_out_free(struct raft_out *o)
{
    free(o->msgs);
    free(o->msg_ent_off);
    free(o->ents);
    free(o->reads);
    memset(o, 0, sizeof(*o));
}

static bool out_grow_msgs(struct raft_out *o)
{
    uint32_t cap = o->cap_msgs ? o->cap_msgs * 2 : 16;
    struct tk_raft_msg *msgs = realloc(o->msgs, cap * sizeof(*msgs));
    if (msgs == NULL)
        return false;
    o->msgs = msgs;
    uint64_t *off = realloc(o->msg_ent_off, cap * sizeof(*off));
    if (off == NULL)
        return false;
    o->msg_ent_off = off;
    o->cap_msgs = cap;
    return true;
}

struct tk_raft_msg *raft_out_msg(struct tk_raft *r, uint8_t type, uint64_t to)
{
    struct raft_out *o = &r->out;
    if (o->n_msgs == o->cap_msgs && !out_grow_msgs(o)) {
        o->dropped++;
        return NULL;
    }
    struct tk_raft_msg *m = &o->msgs[o->n_msgs];
    memset(m, 0, sizeof(*m));
    m->type = type;
    m->from = r->id;
    m->to = to;
    m->term = r->term;
    o->msg_ent_off[o->n_msgs] = UINT64_MAX;
    o->n_msgs++;
    return m;
}

bool raft_out_append_entries(struct tk_raft *r,
                             struct tk_raft_msg *m,
                             uint64_t from_index,
                             uint32_t n)
{
    struct raft_out *o = &r->out;
    TK_ASSERT(m->type == TK_RAFT_MSG_APPEND);
    TK_ASSERT(m == &o->msgs[o->n_msgs - 1]);
    if (o->n_ents + n > o->cap_ents) {
        uint64_t cap = o->cap_ents ? o->cap_ents : 64;
        while (cap < o->n_ents + n)
            cap *= 2;
        struct tk_raft_entry *ents = realloc(o->ents, cap * sizeof(*ents));
        if (ents == NULL)
            return false;
        o->ents = ents;
        o->cap_ents = cap;
    }
    o->msg_ent_off[o->n_msgs - 1] = o->n_ents;
    for (uint32_t i = 0; i < n; i++) {
        const struct tk_raft_entry *e = raft_log_get(&r->log, from_index + i);
        TK_ASSERT(e != NULL);
        o->ents[o->n_ents++] = *e;
    }
    m->append.n = n;
    m->append.entries = NULL;
    return true;
}

void raft_out_read(struct tk_raft *r, uint64_t id, uint64_t index, bool ok)
{
    struct raft_out *o = &r->out;
    /* Sized by tk_raft_create: at most reads_max barriers are pending, so they all fit. */
    TK_ASSERT(o->n_reads < o->cap_reads);
    o->reads[o->n_reads].id = id;
    o->reads[o->n_reads].index = index;
    o->reads[o->n_reads].ok = ok;
    o->n_reads++;
}

void raft_out_finish(struct raft_out *o)
{
    for (uint32_t i = 0; i < o->n_msgs; i++) {
        if (o->msgs[i].type != TK_RAFT_MSG_APPEND)
            continue;
        uint64_t off = o->msg_ent_off[i];
        TK_ASSERT(off != UINT64_MAX);
        o->msgs[i].append.entries = o->msgs[i].append.n > 0 ? &o->ents[off] : NULL;
    }
}
