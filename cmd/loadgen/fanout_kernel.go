package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// tcpCounterNames are the machine's TCP counters the fan-out report shows: connect
// latency of a second or more usually means dropped SYNs or a full accept queue.
var tcpCounterNames = []string{
	"Tcp:RetransSegs", "Tcp:AttemptFails", "Tcp:EstabResets",
	"TcpExt:ListenOverflows", "TcpExt:ListenDrops", "TcpExt:TCPReqQFullDrop", "TcpExt:TCPBacklogDrop",
	"TcpExt:TCPSynRetrans", "TcpExt:TCPTimeouts", "TcpExt:TCPAbortOnMemory", "TcpExt:TWRecycled",
}

// readTCPCounters reads /proc/net/snmp and /proc/net/netstat; nil when unavailable.
func readTCPCounters() map[string]int64 {
	out := map[string]int64{}
	for _, path := range []string{"/proc/net/snmp", "/proc/net/netstat"} {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		parseNetstat(data, out)
	}
	return out
}

// parseNetstat reads the "Prefix: names" / "Prefix: values" line pairs of /proc/net/snmp
// and /proc/net/netstat into out as "Prefix:Name".
func parseNetstat(data []byte, out map[string]int64) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var names []string
	var prefix string
	for sc.Scan() {
		p, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if names == nil || p != prefix {
			prefix, names = p, f
			continue
		}
		for i, v := range f {
			if i >= len(names) {
				break
			}
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				out[p+":"+names[i]] = n
			}
		}
		names = nil
	}
}

// tcpDelta is b - a for the counters of tcpCounterNames that moved.
func tcpDelta(a, b map[string]int64) map[string]int64 {
	if a == nil || b == nil {
		return nil
	}
	out := map[string]int64{}
	for _, k := range tcpCounterNames {
		if d := b[k] - a[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}
