package main

import (
	"errors"
	"math"
	"runtime/debug"
	"testing"
)

// TestGCDefaults: GOGC 400 and a soft memory limit of 70 % of the container's unless the
// environment sets them; no limit without a container limit.
func TestGCDefaults(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	file := func(content string) func(string) ([]byte, error) {
		return func(path string) ([]byte, error) {
			if path != "/sys/fs/cgroup/memory.max" {
				return nil, errors.New("unexpected " + path)
			}
			return []byte(content), nil
		}
	}
	none := func(string) string { return "" }

	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	if got := setGCDefaults(none, file("1073741824\n")); got != 751619274 || debug.SetMemoryLimit(-1) != 751619274 {
		t.Errorf("limit %d, want 70 %% of 1 GiB", got)
	}
	if p := debug.SetGCPercent(100); p != gcPercent {
		t.Errorf("GOGC %d, want %d", p, gcPercent)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	if got := setGCDefaults(none, file("max\n")); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("without a container limit: limit %d", got)
	}
	if got := setGCDefaults(none, func(string) ([]byte, error) { return nil, errors.New("no cgroup") }); got != 0 {
		t.Errorf("without a cgroup file: limit %d", got)
	}

	debug.SetGCPercent(100)
	set := func(k string) string {
		return map[string]string{"GOGC": "100", "GOMEMLIMIT": "1GiB"}[k]
	}
	if got := setGCDefaults(set, file("1073741824")); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("GOMEMLIMIT set: the service set a limit %d", got)
	}
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GOGC set: the service changed it to %d", p)
	}
}
