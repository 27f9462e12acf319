package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReadmeQuickStart runs the README's quick start as a reader would after `make run`:
// every command of its shell blocks, in order, with bash and curl, against a service with
// make run's settings (the development secret, the default rate limit). A line
// `X=$(go run ./cmd/leaderboard token …)` runs the same token command in process. Each
// command must answer JSON without an error_code, and where the README shows the answer
// (a `# {…}` line below the command) the answer must read so, `…` standing for anything
// and a date for any date.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the service")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	steps := quickStartSteps(t, string(readme))
	env := newTestEnv(t)
	overrides := map[string]string{"LEADERBOARD_JWT_SECRET": "", "LEADERBOARD_RATE_LIMIT": ""} // make run's
	svc := env.start(overrides)
	// curl straight to the service, without a user's ~/.curlrc
	vars := append(os.Environ(), "no_proxy=*", "NO_PROXY=*", "CURL_HOME="+t.TempDir(), "HOME="+t.TempDir())
	tokenLine := regexp.MustCompile(`^(\w+)=\$\(go run \./cmd/leaderboard (token [^)]*)\)`)
	for _, st := range steps {
		if m := tokenLine.FindStringSubmatch(st.command); m != nil {
			var out bytes.Buffer
			if err := runWith(context.Background(), strings.Fields(m[2]), env.getenv(overrides), &out, time.Now); err != nil {
				t.Fatalf("%s: %v", st.command, err)
			}
			vars = append(vars, m[1]+"="+strings.TrimSpace(out.String()))
			continue
		}
		run := func() (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bash, "-c", strings.ReplaceAll(st.command, "localhost:8080", strings.TrimPrefix(svc.base, "http://")))
			cmd.Env = vars
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			var body map[string]any
			if err == nil && (json.Unmarshal(out, &body) != nil || body["error_code"] != nil) {
				err = errors.New("not an answer")
			}
			if err != nil && stderr.Len() > 0 {
				err = fmt.Errorf("%w; stderr: %s", err, strings.TrimSpace(stderr.String()))
			}
			return strings.TrimSpace(string(out)), err
		}
		answer, err := run()
		if err != nil {
			t.Errorf("%s\n  answered %q (%v)", st.command, answer, err)
			continue
		}
		if st.shown == "" {
			continue
		}
		// A read may come before the pipeline applied a write the quick start sent without
		// ?wait=true (another user's, in another partition): it is read again, as a reader
		// would, until it shows what the README shows.
		want := shownAnswer(st.shown)
		write := strings.Contains(st.command, "-X POST") || strings.Contains(st.command, " -d ") || strings.Contains(st.command, "--data")
		for deadline := time.Now().Add(20 * time.Second); !want.MatchString(answer) && !write && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			if answer, err = run(); err != nil {
				break
			}
		}
		if err != nil || !want.MatchString(answer) {
			t.Errorf("%s\n  answered %s (%v)\n  the README shows %s", st.command, answer, err, st.shown)
		}
	}
}

// quickStartStep is a command of the quick start and the answer the README shows for it.
type quickStartStep struct{ command, shown string }

// quickStartSteps reads the commands of the shell blocks between "## Quick start" and the
// next heading of its level or the one below (make run aside), joining lines continued
// with a backslash, and the "# {…}" answer line that follows a command.
func quickStartSteps(t *testing.T, readme string) []quickStartStep {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Quick start\n")
	if !ok {
		t.Fatal("README: no Quick start section")
	}
	if i := strings.Index(section, "\n##"); i >= 0 { // the next heading (a block's comments have one #)
		section = section[:i]
	}
	var steps []quickStartStep
	inBlock, pending := false, ""
	for _, line := range strings.Split(section, "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inBlock = true
			continue
		case strings.HasPrefix(line, "```") && !inBlock:
			t.Fatalf("README: a quick start block opens with %q; this test runs sh blocks only", line)
		case strings.HasPrefix(line, "```"):
			inBlock = false
			continue
		case !inBlock || strings.TrimSpace(line) == "":
			continue
		}
		if pending != "" {
			line = pending + "\n" + line
			pending = ""
		}
		if strings.HasSuffix(line, "\\") {
			pending = line
			continue
		}
		if shown, ok := strings.CutPrefix(line, "# {"); ok && len(steps) > 0 {
			if i := strings.Index(shown, "  #"); i >= 0 { // a remark after the answer
				shown = shown[:i]
			}
			steps[len(steps)-1].shown = "{" + strings.TrimSpace(shown)
			continue
		}
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "make run") {
			continue
		}
		steps = append(steps, quickStartStep{command: line})
	}
	if len(steps) < 20 {
		t.Fatalf("README: only %d quick start commands found", len(steps))
	}
	return steps
}

var isoDate = regexp.MustCompile(`\d{4}-\d{2}-\d{2}`)

// shownAnswer is the pattern of an answer as the README shows it: "…" stands for anything,
// a date for any date.
func shownAnswer(shown string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i, part := range strings.Split(shown, "…") {
		if i > 0 {
			b.WriteString(".*")
		}
		last := 0
		for _, m := range isoDate.FindAllStringIndex(part, -1) {
			b.WriteString(regexp.QuoteMeta(part[last:m[0]]))
			b.WriteString(`\d{4}-\d{2}-\d{2}`)
			last = m[1]
		}
		b.WriteString(regexp.QuoteMeta(part[last:]))
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}
