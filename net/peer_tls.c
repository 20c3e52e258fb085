/* TLS on the Raft thread's peer links (net/peer_int.h): starting a
 * session on a link, the first bytes checked for what a member without
 * TLS (or with it, facing one without) sends, the certificate of an
 * inbound link checked against the members, failures named, and the two
 * peer contexts loaded and reloaded. The bytes themselves go through the
 * link's stream (net/stream.h).
 *
 * With --tls-cert every link is mutual TLS: the accepting side requires a
 * client certificate signed by the peer CA; the dialling side verifies
 * the server's certificate against it and the host part of the address
 * it dialled, and presents its own. */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/addr.h"
#include "core/proto.h"
#include "core/tls.h"
#include "net/peer_int.h"

/* The link's TLS failed (a certificate from another CA or none, a name
 * mismatch, a plaintext peer, a corrupt record): one line naming the cause
 * and the address, counted, and the link closed. why: our own sentence, or
 * NULL for core/tls's. */
void peer_tls_failed(struct tk_peers *p, struct tk_plink *l, const char *why)
{
    if (l->state == L_CLOSING)
        return;
    p->st.tls_failures++;
    const char *err = why ? why : tk_tls_error(l->st.tls);
    /* An alert is all this side learns when the other refused the
     * session; its log names the cause. */
    bool refused = !why && strstr(err, "received alert") != NULL;
    peer_link_warn(p, l, "closed by a TLS failure: %s%s", err,
                   refused ? " (the peer refused the session, most likely our certificate: its log "
                             "says why)"
                           : "");
    tk_stream_push_now(&l->st, l->send_inflight);
    tk_plink_close(p, l);
}

/* The name the dialled server's certificate must carry: the host part of
 * the peer address ("127.0.0.1", a pod's DNS name). wolfSSL checks it
 * against the certificate's DNS SANs (wildcards included) and, for an IP
 * literal, against its IP SANs, which it compares as text: IPv4 dotted as
 * written (checked with wolfSSL 5.5.4: a certificate without that IP SAN
 * is refused), IPv6 fully expanded to 8 groups of 4 hex digits, so an IPv6
 * literal is expanded here first. IP literals are therefore checked, not
 * skipped: members dialled by IP need an IP SAN, as with any TLS client. */
static void tls_name(const char *addr, char *out, size_t cap)
{
    struct tk_addr a;
    const char *why;
    if (tk_addr_parse(addr, strlen(addr), &a, &why) != TK_OK)
        snprintf(a.host, sizeof(a.host), "%s", addr);
    tk_tls_host_name(a.host, out, cap);
}

/* Gives a link whose socket just connected (or was accepted) its TLS
 * state, on the current context. A dialler writes its ClientHello now.
 * False on allocation failure. */
bool peer_tls_begin(struct tk_peers *p, struct tk_plink *l)
{
    TK_ASSERT(l->st.tls == NULL);
    tk_stream_tls_thread();
    l->tls_seen = false;
    struct tk_tls *tls;
    if (!l->outbound) {
        tls = tk_tls_new(p->tls_server, NULL);
    } else {
        char name[TK_ADDR_MAX];
        tls_name(l->addr, name, sizeof(name));
        tls = tk_tls_new(p->tls_client, name);
    }
    if (!tls)
        return false;
    tk_stream_open(&l->st, l->st.fd, tls);
    uint8_t none;
    size_t got;
    return !l->outbound || tk_tls_read(tls, &none, 0, &got) == TK_OK;
}

/* An inbound link's TLS is done: its certificate is signed by the peer
 * CA. With a CA of its own (--tls-peer-ca) that is all a peer needs;
 * with the CA shared with clients, the certificate must also name a
 * member (cb.peer_cert: the hosts of --peers and the configuration, and
 * --tls-peer-names), so a client's certificate does not open the peer
 * port. Checked before any line is read or written: the banner follows. */
static void tls_check_peer(struct tk_peers *p, struct tk_plink *l)
{
    l->cert_checked = true;
    if (p->s->opt.tls_peer_ca[0] || !p->cb.peer_cert || p->cb.peer_cert(p->cb.ctx, l->st.tls)) {
        char line[TK_HS_LINE_MAX]; /* the banner, held back until now (on_accept) */
        peer_send_line(l, line, tk_proto_fmt_banner(line, sizeof(line), true, l->hs.snonce));
        return;
    }
    p->st.certs_refused++;
    peer_tls_failed(p, l,
                    "its certificate names no member (neither a host of --peers or the "
                    "configuration nor one of --tls-peer-names): a client's certificate, not a "
                    "peer's? Give the peer port a CA of its own with --tls-peer-ca");
}

/* n bytes were received at the tail of l->st.in: through the stream (with
 * TLS, ciphertext fed to TLS and the plaintext it completes written in
 * their place). l->st.in stays bounded as without TLS (link_input cuts
 * the link past IN_CAP_MAX - RECV_CHUNK), overshot by one record at most. */
void peer_recv(struct tk_peers *p, struct tk_plink *l, size_t n)
{
    const char *data = l->st.in.p + l->st.in.len;
    if (!l->st.tls) {
        l->st.type->input(&l->st, data, n, 0);
        return;
    }
    bool first = !l->tls_seen;
    l->tls_seen = true;
    if (l->outbound && first) {
        /* A server speaks first only without TLS (its banner): say so
         * rather than what the record parser would make of it. */
        if ((unsigned char)data[0] != TLS_RECORD_HANDSHAKE) {
            char why[200];
            snprintf(why, sizeof(why),
                     "the peer answered in plaintext (first byte 0x%02x, not a TLS record): it "
                     "runs without TLS on its peer port, and every member needs --tls-cert, "
                     "--tls-key and --tls-ca",
                     (unsigned char)data[0]);
            peer_tls_failed(p, l, why);
            return;
        }
    }
    int rc = l->st.type->input(&l->st, data, n, 0);
    if (rc == TK_ECLOSED) /* close_notify: as an end of stream */
        tk_plink_close(p, l);
    else if (rc != TK_OK)
        peer_tls_failed(p, l, NULL);
    else if (!l->outbound && !l->cert_checked && tk_tls_ready(l->st.tls))
        tls_check_peer(p, l);
}

/* An inbound TLS link ended by its dialler before a single byte came:
 * after a second or more that is what a member without TLS does (it waits
 * for a plaintext banner until its own handshake deadline, then gives up),
 * so say so; a quicker close (a port probe) goes unremarked. Counted as a
 * TLS failure: the link failed before TLS could start. */
void peer_tls_eof(struct tk_peers *p, struct tk_plink *l)
{
    uint64_t hs_us = (uint64_t)p->s->opt.handshake_ms * 1000u;
    uint64_t age_us = tk_now_us() + hs_us - l->deadline_us;
    if (l->outbound || l->tls_seen || l->state != L_AUTH || age_us < 1000000u)
        return;
    p->st.tls_failures++;
    peer_link_warn(p, l,
                   "closed by the peer after %llu ms without a TLS hello (a member without "
                   "--tls-cert dials in plaintext and waits for a banner)",
                   (unsigned long long)(age_us / 1000u));
}

/* Both contexts from the options: an acceptor that requires a client
 * certificate signed by --tls-ca, and a dialler that verifies the server
 * with it and presents --tls-cert. TK_OK, or TK_EINVAL with why naming the
 * file and the cause. */
int peer_tls_contexts(const struct tk_options *o,
                      struct tk_tls_ctx **server,
                      struct tk_tls_ctx **client,
                      char *why,
                      size_t cap)
{
    *server = *client = NULL;
    const char *ca = o->tls_peer_ca[0] ? o->tls_peer_ca : o->tls_ca;
    const char *cert = o->tls_peer_cert[0] ? o->tls_peer_cert : o->tls_cert;
    const char *key = o->tls_peer_cert[0] ? o->tls_peer_key : o->tls_key;
    if (!ca[0]) {
        snprintf(why, cap,
                 "--tls-ca (or --tls-peer-ca) is required with --tls-cert on a cluster member: "
                 "peers verify each other's certificates with it");
        return TK_EINVAL;
    }
    struct tk_tls_opts so = {
        .server = true, .cert = cert, .key = key, .ca = ca, .verify_peer = true};
    struct tk_tls_opts co = {.cert = cert, .key = key, .ca = ca};
    int rc = tk_tls_ctx_new(&so, server, why, cap);
    if (rc == TK_OK && (rc = tk_tls_ctx_new(&co, client, why, cap)) != TK_OK) {
        tk_tls_ctx_unref(*server);
        *server = NULL;
    }
    return rc == TK_OK ? TK_OK : TK_EINVAL;
}

int tk_peers_tls_reload(struct tk_peers *p)
{
    if (!p->tls_server)
        return TK_OK;
    struct tk_tls_ctx *server, *client;
    char why[TK_TLS_ERR_MAX];
    tk_stream_tls_thread(); /* the contexts' self check runs a handshake here */
    if (peer_tls_contexts(&p->s->opt, &server, &client, why, sizeof(why)) != TK_OK) {
        tk_log(TK_LOG_ERROR, "peer TLS reload failed, keeping the previous certificates: %s", why);
        return TK_EINVAL;
    }
    tk_tls_ctx_unref(p->tls_server); /* open links keep theirs alive */
    tk_tls_ctx_unref(p->tls_client);
    p->tls_server = server;
    p->tls_client = client;
    tk_log(TK_LOG_INFO, "peer TLS: reloaded %s for new peer links", p->s->opt.tls_cert);
    return TK_OK;
}
