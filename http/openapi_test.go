package http

import (
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/openleaderboard/leaderboard/configs"
)

// paramPattern matches a chi parameter with a regular expression, {id:[0-9]+}.
var paramPattern = regexp.MustCompile(`\{([a-z_]+):[^}]*\}`)

// TestOpenAPIDescribesTheRoutes: every route the server has is in openapi.yaml, and
// openapi.yaml names no route the server lacks.
func TestOpenAPIDescribesTheRoutes(t *testing.T) {
	raw, err := os.ReadFile("../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			if method != "parameters" && method != "summary" && method != "description" {
				documented[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	cfg, _ := configs.Load(func(string) string { return "" })
	h := NewServer(Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Hub: NewHub(HubConfig{}, nil, nil), Registry: prometheus.NewRegistry()})
	served := map[string]bool{}
	err = chi.Walk(h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served[method+" "+paramPattern.ReplaceAllString(strings.TrimSuffix(route, "/"), "{$1}")] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if served["GET "] { // chi reports the root route without its slash
		delete(served, "GET ")
		served["GET /"] = true
	}
	var missing, extra []string
	for r := range served {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for r := range documented {
		if !served[r] {
			extra = append(extra, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) > 0 {
		t.Fatalf("routes not in openapi.yaml: %v; documented but not served: %v", missing, extra)
	}
}
