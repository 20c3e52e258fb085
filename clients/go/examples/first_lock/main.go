// first_lock: acquire, work under the lock, release.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"ticketing.example/ticketing"
)

func main() {
	c, err := ticketing.Dial(ticketing.Config{
		Addrs:      []string{os.Getenv("TICKETING_ADDR")}, // "host:port,host:port"
		SecretFile: os.Getenv("TICKETING_SECRET_FILE"),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close() // waits for queued releases (at most 5 s)

	ctx := context.Background()
	// Lease 30 s (the safety net if we die), wait at most 5 s for our turn.
	g, err := c.Acquire(ctx, "inventory/sku-1", 30*time.Second, 5*time.Second)
	if err != nil {
		// ErrBusy, ErrTimeout, ErrUnavailable: not acquired.
		// ErrIndeterminate: maybe acquired; either way we must not enter.
		fmt.Fprintln(os.Stderr, "not acquired:", err)
		os.Exit(1)
	}
	// The critical section: finish before g.LeaseDeadline and pass g.Token
	// to every write it protects.
	fmt.Printf("holding %s with token %d, %d ms of lease left\n",
		g.Key, g.Token, time.Until(g.LeaseDeadline).Milliseconds())

	if err := c.Release(ctx, g); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err, "(the lease will free the key)")
	}
}
