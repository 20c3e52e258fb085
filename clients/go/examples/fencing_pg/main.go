// fencing_pg: the stale holder of docs/fencing.md, with Ticketing tokens
// fenced in PostgreSQL. Go's standard library has no PostgreSQL driver, so
// this example runs psql (PSQL, default "psql") for each statement; a real
// application would use a driver of its choice with the same SQL.
//
// alice takes the lock of show-42 with a 1 s lease, reads the seats left
// and stalls past her lease. bob queues, gets the lock when her lease runs
// out, and writes first. alice's late write carries her older token and is
// refused by the database.
//
// Needs TICKETING_ADDR, TICKETING_SECRET_FILE, the libpq variables of the
// database (PGHOST, PGPORT, PGUSER, PGDATABASE) and the schema file
// (FENCING_SQL, default docs/examples/fencing_pg.sql). Exit 0 if bob's
// write was applied and alice's refused.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"ticketing.example/ticketing"
)

const key, item = "show-42", "show-42"

func psql(stdin string, vars ...string) string {
	bin := os.Getenv("PSQL")
	if bin == "" {
		bin = "psql"
	}
	args := []string{"-X", "-q", "-v", "ON_ERROR_STOP=1", "-tA"}
	for _, v := range vars {
		args = append(args, "-v", v) // :'name' quotes each value as a literal
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		fail("psql: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func fail(f string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "fencing_pg: "+f+"\n", a...)
	os.Exit(1)
}

// fencedWrite raises the fence of key to token and writes the row, in one
// transaction, only if no newer token wrote before: "applied" or "stale".
func fencedWrite(token uint64, remaining int, writer string) string {
	return psql(`SELECT ticketing_demo.fenced_set_remaining(:'key', :'token', :'item', :'remaining', :'writer');`,
		"key="+key, "token="+strconv.FormatUint(token, 10), "item="+item,
		"remaining="+strconv.Itoa(remaining), "writer="+writer)
}

func remaining() int {
	n, err := strconv.Atoi(psql(`SELECT remaining FROM ticketing_demo.inventory WHERE item = :'item';`, "item="+item))
	if err != nil {
		fail("no inventory row: %v", err)
	}
	return n
}

func client(owner string) *ticketing.Client {
	c, err := ticketing.Dial(ticketing.Config{Addrs: []string{os.Getenv("TICKETING_ADDR")},
		SecretFile: os.Getenv("TICKETING_SECRET_FILE"), Owner: owner})
	if err != nil {
		fail("%v", err)
	}
	return c
}

func main() {
	sql := os.Getenv("FENCING_SQL")
	if sql == "" {
		sql = "docs/examples/fencing_pg.sql"
	}
	schema, err := os.ReadFile(sql)
	if err != nil {
		fail("%v", err)
	}
	psql(string(schema))
	run := fmt.Sprintf("%d", os.Getpid())
	alice, bob := client("alice-"+run), client("bob-"+run)
	defer alice.Close()
	defer bob.Close()
	ctx := context.Background()

	ga, err := alice.Acquire(ctx, key, time.Second, 5*time.Second)
	if err != nil {
		fail("alice: %v", err)
	}
	aliceValue := remaining() - 2
	fmt.Printf("alice: token %d, will write %d, then stalls past her lease\n", ga.Token, aliceValue)

	gb, err := bob.Acquire(ctx, key, 30*time.Second, 10*time.Second) // granted when alice's lease ends
	if err != nil {
		fail("bob: %v", err)
	}
	bobValue := remaining() - 1
	bobResult := fencedWrite(gb.Token, bobValue, "bob-"+run)
	fmt.Printf("bob:   token %d, writes %d: %s\n", gb.Token, bobValue, bobResult)

	aliceResult := fencedWrite(ga.Token, aliceValue, "alice-"+run)
	fmt.Printf("alice: wakes up, writes %d with token %d: %s\n", aliceValue, ga.Token, aliceResult)
	if err := bob.Release(ctx, gb); err != nil {
		fmt.Println("bob:   release:", err)
	}
	fmt.Printf("summary: alice_token=%d bob_token=%d bob_write=%s alice_write=%s\n",
		ga.Token, gb.Token, bobResult, aliceResult)
	if bobResult != "applied" || aliceResult != "stale" || remaining() != bobValue {
		fail("FENCING FAILED: expected bob's write applied and alice's refused")
	}
	fmt.Println("ok:    the stale write was refused and changed nothing")
}
