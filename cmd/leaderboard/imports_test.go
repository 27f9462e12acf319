package main

import (
	"go/build"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestImportDirections keeps the packages' imports pointing one way (README, "Where the
// code is"): a package may import only the project packages listed for it.
func TestImportDirections(t *testing.T) {
	const module = "github.com/openleaderboard/leaderboard/"
	allowed := map[string][]string{
		"configs":  nil,
		"messages": nil,
		"storage":  nil,
		"handlers": {"configs", "messages", "storage"},
		"http":     {"configs", "messages", "storage"},
		"router":   {"handlers", "messages"},
	}
	for pkg, may := range allowed {
		p, err := build.ImportDir(filepath.Join("..", "..", pkg), 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range p.Imports { // not the tests' imports: tests wire real parts
			if dep, ok := strings.CutPrefix(imp, module); ok && !slices.Contains(may, dep) {
				t.Errorf("%s imports %s; it may import only %v", pkg, dep, may)
			}
		}
	}
}
