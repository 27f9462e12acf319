//go:build !unix

package main

// raiseFileLimit is not supported on this platform; 0 means unknown.
func raiseFileLimit() (uint64, error) { return 0, nil }
