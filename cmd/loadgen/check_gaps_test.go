package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/openleaderboard/leaderboard/storage"
	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

// Ways the exactly-once check and the "holds" verdict can pass while the
// service lost or doubly applied a score, and a CPU figure that leaves work out.

// Every best score the bench sends beats every score the user sent before (users.next), so
// a 200 "unchanged" answer is the service refusing an improving score: the score is lost,
// and the client was told that was fine. judge counts neither it as an error nor the
// missing 202 anywhere: a phase whose every send was answered unchanged "holds" at the
// offered rate with nothing accepted, nothing applied and nothing visible.
func TestJudgeUnchangedImprovingScoresDoNotHold(t *testing.T) {
	for _, unchanged := range []int64{20000, 100} {
		r := writeReport{
			OfferedRate: 2000, Issued: 20000, Accepted: 20000 - unchanged, Unchanged: unchanged,
			AcceptLatency: summary{P99: 20}, Visibility: summary{P95: 200},
			Windows: &windowsReport{SizeS: 10, Windows: []windowReport{
				{Accepted: (20000 - unchanged) / 2, Applied: (20000 - unchanged) / 2},
				{Accepted: (20000 - unchanged) / 2, Applied: (20000 - unchanged) / 2},
			}, WorstRatio: 1},
		}
		if h := judge(r); h.Holds {
			t.Errorf("%d of %d improving best scores answered 'unchanged' (never applied): judge says the rate holds (%+v)",
				unchanged, r.Issued, h)
		}
	}
}

// checkFixture is a bench wired to a fresh PostgreSQL database holding the tables the check
// reads (empty) and a Redis prefix of its own: what runCheck sees after a run whose
// commands left nothing behind.
func checkFixture(t *testing.T) (*bench, *storage.Boards) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	servers := storagetest.FromEnv(os.Getenv)
	url := servers.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, `
		CREATE TABLE score_history (event_id text, board_id text, period text, user_id text, value bigint,
		                            applied_at timestamptz NOT NULL DEFAULT now(), UNIQUE (event_id, board_id, period));
		CREATE TABLE score_requests (event_id text PRIMARY KEY);
		CREATE TABLE board_entries (board_id text, period text, user_id text, score bigint);
		CREATE TABLE dead_letters (id bigserial PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	rdb, prefix := servers.NewRedis(t)
	cfg := config{Prefix: prefix, BigBoard: "big", DrainTimeout: 5 * time.Second}
	b := &bench{cfg: cfg, out: io.Discard, pg: conn, rdb: rdb, users: newUsers(4, "u"), matches: newMatches(4, 2),
		ledger: &ledger{}, periods: map[string]map[string]bool{}}
	return b, storage.NewBoards(rdb, prefix, 0)
}

// A best score answered "unchanged" although it beats everything the user sent is a lost
// score; runCheck leaves such events out of byID and out of every count, and passes.
func TestCheckFailsOnUnchangedImprovingBestScore(t *testing.T) {
	b, _ := checkFixture(t)
	v := b.users.next(0) // improves on everything user 0 sent (nothing yet)
	b.ledger.add(event{id: "lost-1", user: 0, score: v, kind: kindBest, outcome: unchanged})
	r := b.runCheck(context.Background())
	if r.Error != "" {
		t.Fatalf("check error: %s", r.Error)
	}
	if r.Pass {
		t.Fatalf("exactly-once PASS although the improving best score %d of %s was answered 'unchanged' and never applied: %+v",
			v, b.users.names[0], r)
	}
}

// checkRedis reads only the board periods that have expected entries (and global), so
// whatever Redis holds anywhere else is never looked at: here an increment on points that
// the service answered 409 (never to be applied) sits in Redis, and the check passes. The
// same hides a match point applied in Redis to a second daily or season period, or to a
// match board the check expects nothing on.
func TestCheckReadsRedisBoardPeriodsItExpectsNothingOn(t *testing.T) {
	b, boards := checkFixture(t)
	ctx := context.Background()
	b.ledger.add(event{id: "inc-409", user: 0, score: 5, kind: kindIncr, outcome: rejected})
	target := storage.Target{Board: pointsBoard, Period: allTime}
	if _, err := boards.Load(ctx, target, func() ([]storage.EntryState, map[string]string, error) { return nil, nil, nil }); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, _, err := boards.Apply(ctx, target, []storage.EntryState{{Board: pointsBoard, Period: allTime, UserID: b.users.names[0],
		Score: 5, SortKey: 5, Version: 1, ReachedAt: now, UpdatedAt: now}}, nil); err != nil {
		t.Fatal(err)
	}
	if stored, _, err := boards.Stored(ctx, pointsBoard, allTime); err != nil || len(stored) != 1 {
		t.Fatalf("fixture: points holds %+v, %v", stored, err)
	}
	r := b.runCheck(ctx)
	if r.Error != "" {
		t.Fatalf("check error: %s", r.Error)
	}
	if r.Pass || r.RedisExtra == 0 {
		t.Fatalf("Redis holds %s = 5 on points/all_time, which no accepted or ambiguous command explains; the check says pass %v, redis extra %d",
			b.users.names[0], r.Pass, r.RedisExtra)
	}
}

// The CPU of a group's processes that start and end between two samples (PostgreSQL's
// autovacuum workers on a server with autovacuum on, the default BENCH_PG; a backend of a
// connection that closes; Redis's fork for a save) is counted nowhere: cpuBetween only sees
// processes alive at the second sample. The kernel adds a reaped child's CPU to its
// parent's cutime/cstime (fields 16 and 17 of /proc/<pid>/stat), which parseProcStat does
// not read. Here a child of the "postmaster" burns 0.3 s of CPU and exits between the
// samples; the postgres group is credited with almost none of it.
func TestCPUOfChildrenEndedBetweenSamples(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestChildCPUHelper$")
	parent.Env = append(os.Environ(), "CHILD_CPU_HELPER=parent")
	stdin, err := parent.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); parent.Wait() }()
	lines := bufio.NewScanner(stdout)
	waitFor := func(want string) {
		for lines.Scan() {
			if strings.TrimSpace(lines.Text()) == want {
				return
			}
		}
		t.Fatalf("helper ended before %q: %v", want, lines.Err())
	}
	waitFor("ready")
	g := &procGroups{postmasterPID: parent.Process.Pid, self: os.Getpid(), hz: userHZ()}
	a := g.sample()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	waitFor("done")
	u := cpuBetween(a, g.sample(), g.hz)
	if u.CPUS[grpPostgres] < 0.2 {
		t.Fatalf("a child of the postmaster used 0.3 s of CPU between the samples and ended; the postgres group counts %.3f s (%+v)",
			u.CPUS[grpPostgres], u)
	}
}

// TestChildCPUHelper is the helper process of TestCPUOfChildrenEndedBetweenSamples.
func TestChildCPUHelper(t *testing.T) {
	switch os.Getenv("CHILD_CPU_HELPER") {
	case "parent":
		os.Stdout.WriteString("ready\n")
		in := bufio.NewReader(os.Stdin)
		if _, err := in.ReadString('\n'); err != nil {
			os.Exit(1)
		}
		child := exec.Command(os.Args[0], "-test.run=^TestChildCPUHelper$")
		child.Env = append(os.Environ(), "CHILD_CPU_HELPER=burn")
		if err := child.Run(); err != nil { // Run waits: the child is reaped here
			os.Exit(1)
		}
		os.Stdout.WriteString("done\n")
		io.Copy(io.Discard, in)
		os.Exit(0)
	case "burn":
		x := 0
		for cpuTime() < 300*time.Millisecond {
			for i := range 1 << 16 {
				x += i ^ x
			}
		}
		if x == 42 {
			os.Stdout.WriteString("")
		}
		os.Exit(0)
	}
}
