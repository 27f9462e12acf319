//go:build linux

package main

import (
	"slices"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{"0": {0}, "0-1": {0, 1}, "0,2-4,7": {0, 2, 3, 4, 7}} {
		got, err := parseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a", "3-1", "0-"} {
		if got, err := parseCPUList(in); err == nil {
			t.Errorf("parseCPUList(%q) = %v, want an error", in, got)
		}
	}
}

// TestMachineInstructionsCountWork: the counters see at least the instructions of a loop
// this test runs between two reads (skipped where the kernel offers no counters).
func TestMachineInstructionsCountWork(t *testing.T) {
	m, err := openMachineInstructions()
	if err != nil {
		t.Skipf("no instruction counters here: %v", err)
	}
	defer m.close()
	a, ok := m.read()
	if !ok {
		t.Fatal("first read failed")
	}
	const n = 50_000_000
	x := uint64(1)
	for i := 0; i < n; i++ { // at least 3 instructions an iteration
		x = x*6364136223846793005 + 1442695040888963407
	}
	b, ok := m.read()
	if !ok {
		t.Fatal("second read failed")
	}
	if b < a || b-a < n*3 {
		t.Errorf("counted %d instructions around a loop of %d iterations (x=%d)", b-a, n, x)
	}
	if u := cpuBetween(cpuSample{instr: a, instrOK: true}, cpuSample{instr: b, instrOK: true}, 100); u.Instructions != b-a {
		t.Errorf("cpuBetween's instructions = %d, want %d", u.Instructions, b-a)
	}
}
