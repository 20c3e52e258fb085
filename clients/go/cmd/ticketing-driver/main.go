// Command ticketing-driver is the conformance driver of the Go client: it
// makes one Client from its flags, then reads one JSON command per line on
// stdin and writes one JSON reply per line on stdout (docs/client.md,
// "Go"). The protocol is the same for every official client; a
// WRONG_GROUP reply also carries slot and ring_version, and stats the
// client's ring_version and rerouted.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"ticketing.example/ticketing"
)

type command struct {
	Op      string      `json:"op"`
	Key     *string     `json:"key"`
	LeaseMs json.Number `json:"lease_ms"`
	WaitMs  json.Number `json:"wait_ms"`
	Token   json.Number `json:"token"`
	Ms      json.Number `json:"ms"`
}

func num(n json.Number, name string) (uint64, error) {
	if n == "" {
		return 0, fmt.Errorf("missing %s", name)
	}
	v, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad %s: %v", name, err)
	}
	return v, nil
}

func main() {
	addrs := flag.String("addrs", "", "HOST:PORT[,HOST:PORT...]")
	secret := flag.String("secret-file", "", "client secret file")
	owner := flag.String("owner", "", "owner name")
	grace := flag.Int("response-grace-ms", 0, "")
	connect := flag.Int("connect-timeout-ms", 0, "")
	budget := flag.Int("send-budget-min-ms", 0, "")
	reqTimeout := flag.Int("request-timeout-ms", 0, "")
	bmin := flag.Int("backoff-min-ms", 0, "")
	bmax := flag.Int("backoff-max-ms", 0, "")
	relMax := flag.Int("release-queue-max", 0, "")
	tlsCA := flag.String("tls-ca-file", "", "CA that signs the servers' certificates")
	tlsCert := flag.String("tls-cert-file", "", "client certificate")
	tlsKey := flag.String("tls-key-file", "", "client key")
	tlsName := flag.String("tls-server-name", "", "name checked in the servers' certificates")
	flag.Parse()
	d := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	c, err := ticketing.Dial(ticketing.Config{
		Addrs: strings.Split(*addrs, ","), SecretFile: *secret, Owner: *owner,
		ResponseGrace: d(*grace), ConnectTimeout: d(*connect), SendBudgetMin: d(*budget),
		RequestTimeout: d(*reqTimeout), BackoffMin: d(*bmin), BackoffMax: d(*bmax),
		ReleaseQueueMax: *relMax, TLSCAFile: *tlsCA, TLSCertFile: *tlsCert, TLSKeyFile: *tlsKey,
		TLSServerName: *tlsName})
	if err != nil {
		fmt.Fprintln(os.Stderr, "ticketing-driver:", err)
		os.Exit(2)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64*1024), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		start := time.Now()
		reply, stop := handle(c, line)
		reply["elapsed_ms"] = time.Since(start).Milliseconds()
		enc.Encode(reply)
		out.Flush()
		if stop {
			c.Close()
			os.Exit(0)
		}
	}
	c.Close()
}

func handle(c *ticketing.Client, line string) (map[string]interface{}, bool) {
	var cmd command
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	bad := func(msg string) map[string]interface{} {
		return map[string]interface{}{"outcome": "DRIVER_ERROR", "message": msg}
	}
	if err := dec.Decode(&cmd); err != nil {
		return bad("not a JSON command: " + err.Error()), false
	}
	needKey := func() (string, error) {
		if cmd.Key == nil {
			return "", errors.New("missing key")
		}
		return *cmd.Key, nil
	}
	ctx := context.Background()
	switch cmd.Op {
	case "acquire":
		key, err := needKey()
		lease, err2 := num(cmd.LeaseMs, "lease_ms")
		wait, err3 := num(cmd.WaitMs, "wait_ms")
		if err = first(err, err2, err3); err != nil {
			return bad(err.Error()), false
		}
		g, err := c.Acquire(ctx, key, time.Duration(lease)*time.Millisecond, time.Duration(wait)*time.Millisecond)
		return wrong(err, map[string]interface{}{"outcome": ticketing.OutcomeName("acquire", err),
			"token": g.Token, "reason": reasonOf(err)}), false
	case "release":
		key, err := needKey()
		tok, err2 := num(cmd.Token, "token")
		if err = first(err, err2); err != nil {
			return bad(err.Error()), false
		}
		resent, err := c.ReleaseToken(ctx, key, tok)
		return wrong(err, map[string]interface{}{"outcome": ticketing.OutcomeName("release", err),
			"resent": resent, "reason": reasonOf(err)}), false
	case "query":
		key, err := needKey()
		if err != nil {
			return bad(err.Error()), false
		}
		q, err := c.Query(ctx, key)
		var owner interface{}
		if q.Held {
			owner = q.Owner
		}
		return wrong(err, map[string]interface{}{"outcome": ticketing.OutcomeName("query", err),
			"held": q.Held, "owner": owner, "token": q.Token, "waiters": q.Waiters,
			"reason": reasonOf(err)}), false
	case "ping":
		_, err := c.Ping(ctx)
		return map[string]interface{}{"outcome": ticketing.OutcomeName("ping", err), "reason": reasonOf(err)}, false
	case "ring":
		r, err := c.Ring(ctx)
		return map[string]interface{}{"outcome": ticketing.OutcomeName("ring", err), "version": r.Version,
			"body": r.Body, "reason": reasonOf(err)}, false
	case "sleep":
		n, err := num(cmd.Ms, "ms")
		if err != nil {
			return bad(err.Error()), false
		}
		time.Sleep(time.Duration(n) * time.Millisecond)
		return map[string]interface{}{"outcome": "OK"}, false
	case "slot":
		key, err := needKey()
		if err != nil {
			return bad(err.Error()), false
		}
		return map[string]interface{}{"outcome": "OK", "slot": ticketing.Slot(key)}, false
	case "stats":
		s := c.Stats()
		return map[string]interface{}{"outcome": "OK", "compensations": s.Compensations,
			"indeterminate": s.Indeterminate, "moved": s.Moved, "releases_queued": s.ReleasesQueued,
			"ring_version": s.RingVersion, "rerouted": s.Rerouted}, false
	case "close":
		return map[string]interface{}{"outcome": "OK"}, true
	}
	return bad(fmt.Sprintf("unknown op %q", cmd.Op)), false
}

// reasonOf is the client's reason word for a result ("tls", "key", ...),
// "" when it names none.
func reasonOf(err error) string {
	var e *ticketing.Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// wrong adds a W answer's slot and ring version to a WRONG_GROUP reply.
func wrong(err error, reply map[string]interface{}) map[string]interface{} {
	var e *ticketing.Error
	if errors.As(err, &e) && errors.Is(err, ticketing.ErrWrongGroup) {
		reply["slot"], reply["ring_version"] = e.Slot, e.RingVersion
	}
	return reply
}

func first(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
