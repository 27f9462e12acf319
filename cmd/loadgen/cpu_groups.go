package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// Process groups whose CPU time the bench reports. The service includes the embedded
// broker (it runs in the service's process). postgres is the postmaster, its background
// processes and the backends of the bench's database; the backends of other databases
// (tests others run on the same server) are counted apart, as noise, and left out of the
// total.
const (
	grpService       = "service"
	grpPostgres      = "postgres"
	grpRedis         = "redis"
	grpLoadgen       = "loadgen"
	grpPostgresOther = "postgres_other_dbs"
	grpTotal         = "total" // service + postgres + redis: the system under test
)

// cpuGroups lists the groups in report order; sutGroups are the ones summed as total.
var (
	cpuGroups = []string{grpService, grpPostgres, grpRedis, grpLoadgen, grpPostgresOther}
	sutGroups = []string{grpService, grpPostgres, grpRedis}
)

// procStat is what the bench reads of /proc/<pid>/stat.
type procStat struct {
	pid, ppid int
	comm      string
	ticks     uint64 // utime + stime, in clock ticks
	children  uint64 // cutime + cstime: the CPU of the children it waited for (ended ones)
	start     uint64 // start time after boot, in clock ticks: with pid, names the process
}

// parseProcStat reads a /proc/<pid>/stat line. The command name in parentheses may hold
// spaces and parentheses, so fields are counted after the last ')': state is field 3,
// ppid 4, utime 14, stime 15, cutime 16, cstime 17, starttime 22.
func parseProcStat(data []byte) (procStat, error) {
	var s procStat
	open, end := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return s, fmt.Errorf("no command name")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data[:open])))
	if err != nil {
		return s, fmt.Errorf("pid: %w", err)
	}
	s.pid, s.comm = pid, string(data[open+1:end])
	f := strings.Fields(string(data[end+1:]))
	if len(f) < 20 {
		return s, fmt.Errorf("%d fields after the command name", len(f))
	}
	// f[0] is field 3 (state): field n is f[n-3].
	ppid, err1 := strconv.Atoi(f[1])
	ut, err2 := strconv.ParseUint(f[11], 10, 64)
	st, err3 := strconv.ParseUint(f[12], 10, 64)
	cut, err5 := strconv.ParseUint(f[13], 10, 64)
	cst, err6 := strconv.ParseUint(f[14], 10, 64)
	start, err4 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil || err6 != nil {
		return s, fmt.Errorf("ppid %q utime %q stime %q cutime %q cstime %q starttime %q", f[1], f[11], f[12], f[13], f[14], f[19])
	}
	s.ppid, s.ticks, s.children, s.start = ppid, ut+st, cut+cst, start
	return s, nil
}

// userHZ is the unit of /proc's CPU times (sysconf(_SC_CLK_TCK), USER_HZ): the kernel
// hands it to every process in its auxiliary vector (AT_CLKTCK), which Go cannot ask
// sysconf for without cgo, so it is read from /proc/self/auxv; 100 when that fails (the
// value on every Linux build that matters).
func userHZ() float64 {
	if data, err := os.ReadFile("/proc/self/auxv"); err == nil {
		if hz := auxvClockTick(data, strconv.IntSize/8); hz > 0 {
			return float64(hz)
		}
	}
	return clockTicks
}

// auxvClockTick finds AT_CLKTCK (17) in an auxiliary vector of native-endian word pairs
// (type, value) ended by AT_NULL; 0 when absent.
func auxvClockTick(data []byte, word int) uint64 {
	const atNull, atClkTck = 0, 17
	read := func(b []byte) uint64 {
		if word == 4 {
			return uint64(binary.NativeEndian.Uint32(b))
		}
		return binary.NativeEndian.Uint64(b)
	}
	for i := 0; i+2*word <= len(data); i += 2 * word {
		switch read(data[i:]) {
		case atNull:
			return 0
		case atClkTck:
			return read(data[i+word:])
		}
	}
	return 0
}

// procKey names a process across samples (a pid may be reused).
type procKey struct {
	pid   int
	start uint64
}

// procCPU is one process's group and CPU ticks at a sample; for a group's root process
// (the service, the postmaster, Redis) also its ended children's, and for a child of one the
// root's group.
type procCPU struct {
	group    string
	ticks    uint64
	root     bool
	children uint64 // a root's cutime + cstime
	parent   string // a root's child: the root's group
}

// cpuSample is the CPU time of every process of the groups at one moment.
type cpuSample struct {
	at    time.Time
	procs map[procKey]procCPU
	// instr is the machine's instructions so far (machineInstructions); instrOK false when
	// they are not counted.
	instr   uint64
	instrOK bool
}

// procGroups finds the processes of each group.
type procGroups struct {
	servicePID    int
	postmasterPID int // 0: not found, postgres is every process named postgres
	redisPID      int // 0: not found, redis is every process named redis-*
	self          int
	dbName        string
	hz            float64
	instr         *machineInstructions // nil: not counted
	notes         []string             // how the groups were found
}

// newProcGroups finds the postmaster as the parent of the bench's own PostgreSQL backend
// and Redis by the process_id it reports, so that other PostgreSQL or Redis servers on the
// machine are not counted.
func newProcGroups(ctx context.Context, servicePID int, pg *pgx.Conn, pgURL string, rdb *redis.Client) *procGroups {
	g := &procGroups{servicePID: servicePID, self: os.Getpid(), hz: userHZ()}
	if m, err := openMachineInstructions(); err != nil {
		g.notes = append(g.notes, fmt.Sprintf("the machine's instructions are not counted: %v", err))
	} else {
		g.instr = m
	}
	if cfg, err := pgx.ParseConfig(pgURL); err == nil {
		g.dbName = cfg.Database
	}
	if servicePID > 0 {
		if _, err := readProcStat(servicePID); err != nil {
			g.notes = append(g.notes, fmt.Sprintf("service pid %d: %v; its CPU is not measured", servicePID, err))
			g.servicePID = 0
		}
	} else {
		g.notes = append(g.notes, "no -service-pid: the service's CPU is not measured")
	}
	if pg != nil {
		var backend int
		if err := pg.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err == nil {
			if st, err := readProcStat(backend); err == nil {
				if parent, err := readProcStat(st.ppid); err == nil && (parent.comm == "postgres" || parent.comm == "postmaster") {
					g.postmasterPID = parent.pid
				}
			}
		}
	}
	if g.postmasterPID == 0 {
		g.notes = append(g.notes, "postmaster not found from the bench's backend pid (PostgreSQL not in this pid namespace?): postgres = every process named postgres")
	}
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
				if pid, err := strconv.Atoi(v); err == nil {
					if st, err := readProcStat(pid); err == nil && strings.HasPrefix(st.comm, "redis") {
						g.redisPID = pid
					}
				}
			}
		}
	}
	if g.redisPID == 0 {
		g.notes = append(g.notes, "redis process_id not found in this pid namespace: redis = every process named redis-*")
	}
	return g
}

func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(data)
}

// clientBackend matches the host(port) or [local] of a PostgreSQL client backend's title.
var clientBackend = regexp.MustCompile(`(\S+\(\d+\)|\[local\])`)

// postgresChildGroup classifies a child of the postmaster by its process title
// ("postgres: [cluster: ]user db host(port) activity" for client backends): client
// backends of another database than db are postgres_other_dbs, everything else (the bench
// database's backends, background processes and workers) is postgres.
func postgresChildGroup(title, db string) string {
	fields := strings.Fields(strings.ReplaceAll(title, "\x00", " "))
	for _, f := range fields {
		if f == db {
			return grpPostgres
		}
	}
	if clientBackend.MatchString(title) {
		return grpPostgresOther
	}
	return grpPostgres
}

// group is the process's group, "" when it is in none.
func (g *procGroups) group(st procStat) string {
	switch {
	case st.pid == g.self:
		return grpLoadgen
	case g.servicePID > 0 && (st.pid == g.servicePID || st.ppid == g.servicePID):
		return grpService
	case g.redisPID > 0 && (st.pid == g.redisPID || st.ppid == g.redisPID):
		return grpRedis
	case g.redisPID == 0 && strings.HasPrefix(st.comm, "redis-"):
		return grpRedis
	case g.postmasterPID > 0 && st.pid == g.postmasterPID:
		return grpPostgres
	case g.postmasterPID > 0 && st.ppid == g.postmasterPID:
		title, err := os.ReadFile("/proc/" + strconv.Itoa(st.pid) + "/cmdline")
		if err != nil {
			return grpPostgres
		}
		return postgresChildGroup(string(title), g.dbName)
	case g.postmasterPID == 0 && st.comm == "postgres":
		return grpPostgres
	}
	return ""
}

// isRoot tells whether pid is a group's root process, whose children's CPU, once they ended
// and it waited for them, shows in its cutime and cstime.
func (g *procGroups) isRoot(pid int) bool {
	return pid > 0 && (pid == g.servicePID || pid == g.postmasterPID || pid == g.redisPID)
}

// sample reads the CPU time of every process of the groups.
func (g *procGroups) sample() cpuSample {
	s := cpuSample{at: time.Now(), procs: map[procKey]procCPU{}}
	s.instr, s.instrOK = g.instr.read()
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return s
	}
	for _, d := range dir {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil {
			continue // ended meanwhile
		}
		if grp := g.group(st); grp != "" {
			p := procCPU{group: grp, ticks: st.ticks}
			if g.isRoot(st.pid) {
				p.root, p.children = true, st.children
			} else if g.isRoot(st.ppid) {
				p.parent = g.group(procStat{pid: st.ppid})
			}
			s.procs[procKey{st.pid, st.start}] = p
		}
	}
	return s
}

// cpuUsage is the CPU time each group used between two samples.
type cpuUsage struct {
	Wall  time.Duration `json:"-"`
	WallS float64       `json:"wall_s"`
	// CPUS is CPU seconds by group, total included.
	CPUS map[string]float64 `json:"cpu_s"`
	// Cores is CPU seconds / wall seconds by group, total included.
	Cores map[string]float64 `json:"cores"`
	// New counts processes that started between the samples (counted from zero); Gone
	// those that ended (their CPU since the first sample is lost).
	New  map[string]int `json:"new_processes,omitempty"`
	Gone map[string]int `json:"ended_processes,omitempty"`
	// Instructions is what every CPU of the machine retired between the samples, in user
	// and kernel mode, whoever ran (the load generator and other users included); 0 when
	// not counted.
	Instructions uint64 `json:"machine_instructions,omitempty"`
}

// cpuBetween is what each group used from a to b: processes seen at both count their
// difference, processes new at b count from zero; processes that ended meanwhile count
// through their root's cutime and cstime (the postmaster waits for its backends and
// autovacuum workers, Redis for its save child), less what they had used at a, in the
// root's group (an ended backend of another database counts as postgres).
func cpuBetween(a, b cpuSample, hz float64) cpuUsage {
	u := cpuUsage{Wall: b.at.Sub(a.at), WallS: seconds(b.at.Sub(a.at)), CPUS: map[string]float64{}, Cores: map[string]float64{}, New: map[string]int{}, Gone: map[string]int{}}
	if a.instrOK && b.instrOK && b.instr >= a.instr {
		u.Instructions = b.instr - a.instr
	}
	if len(a.procs) == 0 || len(b.procs) == 0 || hz <= 0 {
		return u
	}
	ticks := map[string]int64{}
	for k, p := range b.procs {
		before, ok := a.procs[k]
		switch {
		case !ok:
			u.New[p.group]++
			ticks[p.group] += int64(p.ticks)
		case p.ticks >= before.ticks:
			ticks[p.group] += int64(p.ticks - before.ticks)
		}
		if ok && p.root && p.children >= before.children {
			ticks[p.group] += int64(p.children - before.children)
		}
	}
	for k, p := range a.procs {
		if _, ok := b.procs[k]; !ok {
			u.Gone[p.group]++
			if p.parent != "" {
				ticks[p.parent] -= int64(p.ticks)
			}
		}
	}
	for grp, t := range ticks {
		if t < 0 { // a child gone but not waited for yet: its CPU counts at the next sample
			ticks[grp] = 0
		}
	}
	var total float64
	for _, grp := range cpuGroups {
		s := float64(ticks[grp]) / hz
		u.CPUS[grp] = round3(s)
		u.Cores[grp] = cores(time.Duration(s*float64(time.Second)), u.Wall)
	}
	for _, grp := range sutGroups {
		total += float64(ticks[grp]) / hz
	}
	u.CPUS[grpTotal] = round3(total)
	u.Cores[grpTotal] = cores(time.Duration(total*float64(time.Second)), u.Wall)
	return u
}

// kInstrPerUnit is thousands of the machine's instructions per unit of work; 0 when
// they were not counted or there was no work.
func (u cpuUsage) kInstrPerUnit(n int64) float64 {
	if n <= 0 || u.Instructions == 0 {
		return 0
	}
	return round2(float64(u.Instructions) / 1000 / float64(n))
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// perUnit is µs of CPU per unit of work (an applied row, a command, a request) by group,
// total included; nil when there was no work or nothing was measured.
func (u cpuUsage) perUnit(n int64) map[string]float64 {
	if n <= 0 || len(u.CPUS) == 0 {
		return nil
	}
	out := map[string]float64{}
	for grp, s := range u.CPUS {
		out[grp] = round2(s * 1e6 / float64(n))
	}
	return out
}
