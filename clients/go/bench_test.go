package ticketing

import (
	"context"
	"testing"
	"time"
)

// BenchmarkAcquireRelease: sequential acquire+release pairs on one key
// through one client against a standalone node started for it; ns/op is
// the cost of one pair, round trips included.
//
//	go test -run '^$' -bench AcquireRelease -benchtime 20000x
func BenchmarkAcquireRelease(b *testing.B) {
	n, secret := standalone(b)
	c := dial(b, []string{n.addr()}, secret, nil)
	ctx := context.Background()
	if _, err := c.Ping(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g, err := c.Acquire(ctx, "bench", 30*time.Second, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Release(ctx, g); err != nil {
			b.Fatal(err)
		}
	}
}
