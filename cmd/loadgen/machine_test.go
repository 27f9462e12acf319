package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTHPMode reads the bracketed mode of the kernel's transparent huge pages file, and
// nothing from a file that is missing or says no mode.
func TestTHPMode(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]string{
		"always [madvise] never\n": "madvise",
		"[always] madvise never\n": "always",
		"always madvise [never]\n": "never",
		"always madvise never\n":   "",
	} {
		p := filepath.Join(dir, "enabled")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := thpMode(p); got != want {
			t.Errorf("thpMode(%q) = %q, want %q", content, got, want)
		}
	}
	if got := thpMode(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("thpMode of a missing file = %q, want empty", got)
	}
}
