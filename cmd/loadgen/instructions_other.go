//go:build !linux

package main

import "errors"

// machineInstructions is not measured off Linux.
type machineInstructions struct{}

func openMachineInstructions() (*machineInstructions, error) {
	return nil, errors.New("instruction counters are read on Linux only")
}

func (m *machineInstructions) read() (uint64, bool) { return 0, false }
