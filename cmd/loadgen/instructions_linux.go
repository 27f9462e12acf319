//go:build linux

package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// machineInstructions counts the instructions every CPU of the machine retires, in user
// and kernel mode, whatever process runs on it: the load generator's and other users'
// too. Unlike CPU time it does not grow when the machine is slow (a shared host's
// contention lowers instructions per cycle, not instructions per score), so it compares
// builds measured hours apart. It needs perf_event_open for whole CPUs: root, or
// kernel.perf_event_paranoid at 0 or below, and a PMU the kernel exposes (a virtual
// machine's may be absent).
type machineInstructions struct {
	fds []int
}

// openMachineInstructions opens one counter per online CPU.
func openMachineInstructions() (*machineInstructions, error) {
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	m := &machineInstructions{}
	for _, cpu := range cpus {
		attr := unix.PerfEventAttr{
			Type:        unix.PERF_TYPE_HARDWARE,
			Config:      unix.PERF_COUNT_HW_INSTRUCTIONS,
			Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Read_format: unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING,
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			m.close()
			return nil, fmt.Errorf("perf_event_open(instructions, cpu %d): %w", cpu, err)
		}
		m.fds = append(m.fds, fd)
	}
	if _, ok := m.read(); !ok {
		m.close()
		return nil, fmt.Errorf("the instruction counters do not read")
	}
	return m, nil
}

// read is the instructions retired since the counters opened, summed over the CPUs; a
// counter the kernel multiplexed with others counts in proportion to the time it ran.
// ok is false when a counter could not be read or never ran.
func (m *machineInstructions) read() (total uint64, ok bool) {
	if m == nil || len(m.fds) == 0 {
		return 0, false
	}
	var buf [24]byte // value, time enabled, time running
	for _, fd := range m.fds {
		if n, err := unix.Read(fd, buf[:]); err != nil || n != len(buf) {
			return 0, false
		}
		value := binary.NativeEndian.Uint64(buf[0:])
		enabled := binary.NativeEndian.Uint64(buf[8:])
		running := binary.NativeEndian.Uint64(buf[16:])
		switch {
		case running == 0:
			return 0, false
		case running < enabled:
			value = uint64(float64(value) * float64(enabled) / float64(running))
		}
		total += value
	}
	return total, true
}

func (m *machineInstructions) close() {
	for _, fd := range m.fds {
		unix.Close(fd)
	}
	m.fds = nil
}

// onlineCPUs parses /sys/devices/system/cpu/online ("0-1", "0,2-3").
func onlineCPUs() ([]int, error) {
	data, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, err
	}
	return parseCPUList(strings.TrimSpace(string(data)))
}

func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
