package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A small repository that satisfies every rule; each case below breaks
// one and wants the checker to say so.
func baseTree() map[string]string {
	return map[string]string{
		"go.mod": "module example.com/drv\n",
		"dsn.go": `package drv

var dsnOptions = []struct{ name, doc string }{
	{"pgreplica_wait_budget", "longest wait"},
	{"pgreplica_zone", "the client's zone"},
}

const prefix = "pgreplica_"

var removedOptions = map[string]string{
	"pgreplica_old_zone": "renamed pgreplica_zone",
}
`,
		"config.go": `package drv

import "time"

type Config struct {
	Hosts      []string
	WaitBudget time.Duration
	Zone       string
	internal   int
}
`,
		"stats.go": `package drv

type Stats struct {
	ReplicaReads, PrimaryReads int64
	Fallbacks                  map[string]int64
}

const (
	ReasonTimeout = "timeout"
	RolePrimary   = "primary"
)
`,
		"errors.go": `package drv

import "errors"

var ErrNoPrimary = errors.New("no primary")

type HostError struct{ Addr string }

func (e *HostError) Error() string { return e.Addr }
`,
		"prom/doc.go": `// Package prom exports Stats, namespace "pgreplica".
//
//	pgreplica_reads_total{route}            route is replica or primary
//	pgreplica_read_fallbacks_total{reason}  reason is timeout
//	pgreplica_node_role{role}               role is primary
package prom
`,
		"prom/collector.go": `package prom

const DefaultNamespace = "pgreplica"

func names() []string {
	return []string{"reads_total", "route", "replica", "primary", "read_fallbacks_total", "reason", "node_role", "role"}
}
`,
		"pgx/config.go": `package pgx

type Config struct {
	MaxConns int32
	Routing  struct{}
}
`,
		"README.md": "# drv\n\n[settings](docs/operations.md#settings), [errors](docs/errors.md).\n\n" +
			"    go test -race -count=1 -p 1 $(go list -m -f '{{.Dir}}/...')\n",
		"docs/operations.md": `# Operations

## Settings

| DSN key | Config field | default |
|---|---|---|
| host list | ` + "`Hosts`" + ` | — |
| ` + "`pgreplica_wait_budget`" + ` | ` + "`WaitBudget`" + ` | 150ms |
| ` + "`pgreplica_zone`" + ` | ` + "`Zone`" + ` | none |

### Removed settings

| removed | now |
|---|---|
| ` + "`pgreplica_old_zone`" + ` | renamed ` + "`pgreplica_zone`" + ` |

## Metrics

` + "`Stats()`" + `: ` + "`ReplicaReads`, `PrimaryReads`, `Fallbacks`" + ` (see [errors](errors.md#reads)).
A bound is ` + "`Config.WaitBudget`, `pgreplica_wait_budget`" + `; the metric is ` + "`pgreplica_reads_total`" + `.
`,
		"docs/errors.md": "# Errors\n\n## Reads\n\n`ErrNoPrimary`, `*HostError`.\n",
		"docs/pgx.md":    "# pgx\n\n## Hooks\n\n| field | what |\n|---|---|\n| `MaxConns` | per server |\n| `Routing` | the rest |\n",
	}
}

func fixtureConfig(root string) config {
	return config{
		root:            root,
		driverPkg:       ".",
		settingsDoc:     "docs/operations.md",
		settingsSection: "Settings",
		removedVar:      "removedOptions",
		removedSection:  "Removed settings",
		statsDoc:        "docs/operations.md",
		errorDocs:       []errorDoc{{".", "docs/errors.md"}},
		metricPkgs:      []string{"prom"},
		pgxPkg:          "pgx",
		pgxDoc:          "docs/pgx.md",
		pgxSection:      "Hooks",
		readme:          "README.md",
		mustContain:     []string{"go test -race -count=1 -p 1 $(go list -m -f '{{.Dir}}/...')"},
		docGlobs:        []string{"README.md", "docs/*.md"},
	}
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, text := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCleanTreePasses(t *testing.T) {
	if got := check(fixtureConfig(writeTree(t, baseTree()))); len(got) != 0 {
		t.Fatalf("the clean tree has problems:\n%v", got)
	}
}

// TestUndocumentedFails breaks the tree one way at a time: each must
// fail, with a message naming what broke.
func TestUndocumentedFails(t *testing.T) {
	replace := func(file, old, new string) func(map[string]string) {
		return func(files map[string]string) {
			if !strings.Contains(files[file], old) {
				panic(file + " has no " + old)
			}
			files[file] = strings.Replace(files[file], old, new, 1)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(map[string]string)
		want   string
	}{
		{"a DSN key the driver accepts, undocumented",
			replace("dsn.go", `{"pgreplica_zone", "the client's zone"},`, `{"pgreplica_zone", "the client's zone"},
	{"pgreplica_fake_key", "a setting nobody documented"},`),
			"the DSN key pgreplica_fake_key (ParseDSN accepts it) is not in the \"Settings\" table"},
		{"a Config field, undocumented",
			replace("config.go", "Zone       string", "Zone       string\n\tFakeField  bool"),
			"the Config field FakeField is not in the \"Settings\" table"},
		{"a key in the table the driver does not have",
			replace("docs/operations.md", "| `pgreplica_zone` |", "| `pgreplica_zone`, `pgreplica_gone` |"),
			"documents pgreplica_gone, which is no DSN key of the driver"},
		{"a field in the table Config does not have",
			replace("docs/operations.md", "| `Zone` |", "| `Zone`, `Zones` |"),
			"documents Config.Zones, which Config does not have"},
		{"a key documented twice",
			replace("docs/operations.md", "| `pgreplica_zone` |", "| `pgreplica_zone`, `pgreplica_wait_budget` |"),
			"the DSN key pgreplica_wait_budget is documented 2 times"},
		{"a Stats field, undocumented",
			replace("stats.go", "Fallbacks                  map[string]int64", "Fallbacks                  map[string]int64\n\tFakeCounter int64"),
			"the Stats field FakeCounter is not mentioned"},
		{"an error variable, undocumented",
			replace("errors.go", `var ErrNoPrimary = errors.New("no primary")`, `var ErrNoPrimary = errors.New("no primary")

var ErrFake = errors.New("fake")`),
			"the exported error ErrFake (package .) is not mentioned"},
		{"an error type, undocumented",
			replace("errors.go", "type HostError struct{ Addr string }", "type HostError struct{ Addr string }\n\ntype FakeError struct{}"),
			"the exported error FakeError (package .) is not mentioned"},
		{"a label value the collector emits, undocumented",
			replace("prom/collector.go", `"replica", "primary"`, `"replica", "primary", "recent_write"`),
			`"recent_write" (from its code) is emitted but not in the package documentation`},
		{"a label value that reaches the labels through Stats, undocumented",
			replace("stats.go", `ReasonTimeout = "timeout"`, `ReasonTimeout = "timeout"
	ReasonFake    = "fake_reason"`),
			`"fake_reason" (from the driver's ReasonFake) is emitted but not in the package documentation`},
		{"a pgx Config field, undocumented",
			replace("pgx/config.go", "MaxConns int32", "MaxConns int32\n\tMinConns int32"),
			"pgx.Config.MinConns is documented 0 times"},
		{"a page naming a key that does not exist",
			replace("docs/errors.md", "`ErrNoPrimary`", "`ErrNoPrimary` (raise `pgreplica_fallback_wait`)"),
			"docs/errors.md:5: pgreplica_fallback_wait is neither a DSN key of the driver nor a metric of its collector"},
		{"a page naming a Config field that does not exist",
			replace("docs/errors.md", "`ErrNoPrimary`", "`ErrNoPrimary` (`Config.FallbackWait`)"),
			"docs/errors.md:5: Config.FallbackWait: Config has no such field"},
		{"a page naming a Stats field that does not exist",
			replace("docs/errors.md", "`ErrNoPrimary`", "`ErrNoPrimary` (`Stats.Rejected`)"),
			"docs/errors.md:5: Stats.Rejected: Stats has no such field"},
		{"a link to a missing page",
			replace("README.md", "docs/errors.md", "docs/troubleshooting.md"),
			"README.md:3: link docs/troubleshooting.md: docs/troubleshooting.md does not exist"},
		{"a link to a missing anchor",
			replace("docs/operations.md", "errors.md#reads", "errors.md#writes"),
			"link errors.md#writes: docs/errors.md has no heading with the anchor #writes"},
		{"README without CI's test command",
			replace("README.md", "-p 1 $(go list", "$(go list"),
			"README.md: does not contain"},
		{"a removed key back in the settings table",
			replace("docs/operations.md", "| `pgreplica_zone` |", "| `pgreplica_zone`, `pgreplica_old_zone` |"),
			"documents pgreplica_old_zone, which was removed (removedOptions); it belongs under \"Removed settings\""},
		{"a page naming a removed key outside its section",
			replace("docs/errors.md", "`ErrNoPrimary`", "`ErrNoPrimary` (set `pgreplica_old_zone`)"),
			"docs/errors.md:5: pgreplica_old_zone was removed: only the section \"Removed settings\" of docs/operations.md names it"},
		{"a removed key missing from its section",
			replace("docs/operations.md", "| `pgreplica_old_zone` | renamed", "| the old zone key | renamed"),
			"the removed DSN key pgreplica_old_zone (removedOptions) is not in the section \"Removed settings\""},
		{"the removed keys' map moved where the checker cannot see it",
			replace("dsn.go", "var removedOptions =", "var goneOptions ="),
			"found no variable removedOptions"},
		{"the keys' table moved where the checker cannot see it",
			replace("dsn.go", `"pgreplica_wait_budget"`, `"pgreplica_" + "wait_budget"`),
			"documents pgreplica_wait_budget, which is no DSN key of the driver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := baseTree()
			tc.change(files)
			got := check(fixtureConfig(writeTree(t, files)))
			if len(got) == 0 {
				t.Fatalf("passed; want a failure saying %q", tc.want)
			}
			for _, p := range got {
				if strings.Contains(p.String(), tc.want) {
					return
				}
			}
			t.Fatalf("no problem says %q; got:\n%v", tc.want, got)
		})
	}
}

func TestSlug(t *testing.T) {
	for title, want := range map[string]string{
		"pgx's hooks: tracers, types, rotating passwords": "pgxs-hooks-tracers-types-rotating-passwords",
		"Switching from `pgxpool.New`":                    "switching-from-pgxpoolnew",
		"On another PostgreSQL major":                     "on-another-postgresql-major",
		"Read-your-writes, one request":                   "read-your-writes-one-request",
	} {
		if got := slug(title); got != want {
			t.Errorf("slug(%q) = %q, want %q", title, got, want)
		}
	}
}

func TestSplitRow(t *testing.T) {
	got := splitRow("| `a|b` | c \\| d | e |")
	want := []string{"`a|b`", "c | d", "e"}
	if strings.Join(got, "¦") != strings.Join(want, "¦") {
		t.Errorf("splitRow = %q, want %q", got, want)
	}
}
