package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on every Linux
// build that matters; Go cannot ask sysconf without cgo).
const clockTicks = 100

// procSample is what /proc says about a process at one moment.
type procSample struct {
	at      time.Time
	cpu     time.Duration // user + system since the process started
	rss     int64         // VmRSS, bytes
	hwm     int64         // VmHWM (peak RSS), bytes
	threads int64
}

// readProc reads /proc/<pid>/stat and /proc/<pid>/status.
func readProc(pid int) (procSample, error) {
	s := procSample{at: time.Now()}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	if s.cpu, err = parseProcStatCPU(stat); err != nil {
		return s, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	s.rss, s.hwm, s.threads = parseProcStatus(status)
	return s, nil
}

// parseProcStatCPU returns utime + stime (fields 14 and 15) of a /proc/<pid>/stat line.
// The command name in parentheses may hold spaces, so fields are counted after the last ')'.
func parseProcStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name")
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields", len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("utime %q stime %q", f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// parseProcStatus reads VmRSS, VmHWM (in bytes) and Threads of /proc/<pid>/status.
func parseProcStatus(status []byte) (rss, hwm, threads int64) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "VmRSS":
			rss = n << 10
		case "VmHWM":
			hwm = n << 10
		case "Threads":
			threads = n
		}
	}
	return rss, hwm, threads
}

// machineCPU is the first line of /proc/stat: the whole machine's CPU time.
type machineCPU struct {
	busy, total time.Duration
	ok          bool
}

func readMachineCPU() machineCPU {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	return parseMachineCPU(data)
}

// parseMachineCPU reads "cpu  user nice system idle iowait irq softirq steal ...": busy is
// everything but idle and iowait.
func parseMachineCPU(stat []byte) machineCPU {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return machineCPU{}
	}
	var m machineCPU
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return machineCPU{}
		}
		if i >= 8 { // guest and guest_nice are already counted in user and nice
			break
		}
		d := time.Duration(n) * time.Second / clockTicks
		m.total += d
		if i != 3 && i != 4 {
			m.busy += d
		}
	}
	m.ok = true
	return m
}

// busyCores is how many cores the machine kept busy from a to b, on average.
func busyCores(a, b machineCPU, wall time.Duration) float64 {
	if !a.ok || !b.ok {
		return 0
	}
	return cores(b.busy-a.busy, wall)
}

// procWatch samples the server processes' RSS in the background and keeps the peak since
// the last mark.
type procWatch struct {
	pids []int

	mu    sync.Mutex
	peak  map[int]int64
	errs  map[int]string
	stopc chan struct{}
	done  chan struct{}
}

func newProcWatch(pids []int, every time.Duration) *procWatch {
	w := &procWatch{pids: pids, peak: map[int]int64{}, errs: map[int]string{}, stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			w.sample()
			select {
			case <-w.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *procWatch) sample() map[int]procSample {
	out := map[int]procSample{}
	for _, pid := range w.pids {
		s, err := readProc(pid)
		w.mu.Lock()
		if err != nil {
			w.errs[pid] = err.Error()
		} else {
			out[pid] = s
			w.peak[pid] = max(w.peak[pid], s.rss)
		}
		w.mu.Unlock()
	}
	return out
}

// mark samples now and returns the samples and each pid's peak RSS since the previous mark.
func (w *procWatch) mark() (map[int]procSample, map[int]int64) {
	now := w.sample()
	w.mu.Lock()
	defer w.mu.Unlock()
	peak := w.peak
	w.peak = map[int]int64{}
	for pid, s := range now {
		w.peak[pid] = s.rss
	}
	return now, peak
}

func (w *procWatch) stop() {
	close(w.stopc)
	<-w.done
}
