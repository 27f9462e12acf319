package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestServicesScriptLeavesAnotherPostgreSQLAlone runs scripts/services.sh (as `make run`
// and `make test` do) in a private mount namespace, with stubs for the PostgreSQL and
// Redis tools and a Debian cluster directory of its own over /etc/postgresql: nothing of
// the machine changes. A PostgreSQL answers on 127.0.0.1:5432 and refuses user postgres
// without a password (a container's, one not from Debian's packages), and a Debian
// cluster 15/main exists but does not serve 5432 (installed by this script in a container
// without systemd, not started). The script passes and leaves that cluster's pg_hba.conf
// alone, whether LEADERBOARD_POSTGRES_URL or the tests' LEADERBOARD_TEST_POSTGRES_URL
// names a password (then it does not even look) or not (it only warns); the cluster that
// does serve 5432 is given trust on loopback, undone when user postgres still cannot log
// in (it is not what answers there). Run as a user whose sudo fails, it warns and goes on.
// Its check of the login edited that cluster's pg_hba.conf to trust
// every local connection, and failed reloading it: set -e ended `make run` and `make
// test` there (found by a review).
func TestServicesScriptLeavesAnotherPostgreSQLAlone(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for a private mount namespace")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare")
	}
	if _, err := os.Stat("/etc/postgresql"); err != nil {
		t.Skip("no /etc/postgresql to mount over")
	}
	const down, online = "15 main 5433 down", "15 main 5432 online"
	for _, c := range []struct {
		env, cluster string
		trustHelps   bool // whether user postgres logs in once the cluster trusts loopback
		edited       bool
		noSudo       bool // run as a user whose sudo fails: the script only warns
	}{
		{"LEADERBOARD_POSTGRES_URL=postgres://dev:secret@127.0.0.1:5432/leaderboard?sslmode=disable", online, true, false, false},
		{"LEADERBOARD_TEST_POSTGRES_URL=postgres://dev:secret@127.0.0.1:5432/postgres?sslmode=disable", online, true, false, false},
		{"", down, true, false, false},
		{"", online, true, true, false},   // the cluster that serves 5432 (a systemd package's) gets trust on loopback
		{"", online, false, false, false}, // it is not what answers there: the trust is undone
		{"", online, true, false, true},   // no sudo: nothing edited, a warning
	} {
		url := c.env
		dir := t.TempDir()
		bin, etc := filepath.Join(dir, "bin"), filepath.Join(dir, "etc-postgresql")
		conf := filepath.Join(etc, "15", "main")
		for _, d := range []string{bin, conf} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		const hba = "local all postgres peer\nhost all all 127.0.0.1/32 scram-sha-256\n"
		if err := os.WriteFile(filepath.Join(conf, "pg_hba.conf"), []byte(hba), 0o640); err != nil {
			t.Fatal(err)
		}
		stubs := map[string]string{
			"pg_isready": "exit 0", // something answers on 5432
			"psql": map[bool]string{true: "grep -q '^host all all 127.0.0.1/32 trust' /etc/postgresql/15/main/pg_hba.conf 2>/dev/null && exit 0; "}[c.trustHelps] +
				"echo 'password authentication failed' >&2; exit 2", // without a password, until trusted if that helps
			"pg_lsclusters": "echo '" + c.cluster + " postgres /var/lib/postgresql/15/main /var/log/postgresql/postgresql-15-main.log'",
			"pg_ctlcluster": `for a; do [ "$a" = reload ] && { echo "Cluster is not running." >&2; exit 2; }; done; exit 0`,
			"redis-cli":     "echo PONG",
			"redis-server":  "exit 0",
			"apt-get":       "echo apt-get must not run >&2; exit 1",
		}
		if c.noSudo {
			stubs["id"] = `[ "$1" = -u ] && { echo 1000; exit 0; }; exec /usr/bin/id "$@"`
			stubs["sudo"] = "echo 'sudo: a password is required' >&2; exit 1"
		}
		for name, body := range stubs {
			if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		script, err := filepath.Abs("../../scripts/services.sh")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("unshare", "-m", "--propagation", "private", "bash", "-c",
			`mount --bind "$1" /etc/postgresql && exec bash "$2"`, "sh", etc, script)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "LEADERBOARD_POSTGRES_URL=", "LEADERBOARD_TEST_POSTGRES_URL=")
		if url != "" {
			cmd.Env = append(cmd.Env, url)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%q: services.sh failed (%v): `make run` and `make test` stop here:\n%s", url, err, out)
		}
		got, err := os.ReadFile(filepath.Join(conf, "pg_hba.conf"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(conf, "pg_hba.conf.leaderboard-backup")); err == nil {
			t.Errorf("%q, cluster %q: the script left its backup of pg_hba.conf", url, c.cluster)
		}
		if edited := string(got) != hba; edited != c.edited || (edited && !strings.HasPrefix(string(got), "host all all 127.0.0.1/32 trust\n")) {
			t.Errorf("%q, cluster %q, trust helps %v: pg_hba.conf edited %v, want %v:\n%s", url, c.cluster, c.trustHelps, edited, c.edited, strings.TrimSpace(string(got)))
		}
	}
}
