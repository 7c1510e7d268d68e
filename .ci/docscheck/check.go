package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// config says where the checker finds each thing, relative to the
// repository root (slash-separated).
type config struct {
	root string

	// The driver's package: its pgreplica_* DSN keys (every string
	// literal of its code that is a whole key), Config, Stats, errors,
	// and the Reason*/Role* constants that become metric label values.
	driverPkg string
	// settingsDoc's table under the heading settingsSection documents
	// each key (first column) and each Config field (second column)
	// exactly once.
	settingsDoc, settingsSection string
	// removedVar is the driver's map of removed DSN keys (each to what
	// took its place, for the error ParseDSN returns): its string keys
	// are no settings, the section removedSection of settingsDoc names
	// each, and no other part of the pages names any ("" to skip).
	removedVar, removedSection string
	// statsDoc mentions every field of Stats.
	statsDoc string
	// errorDocs: every exported error of each package mentioned in its
	// doc.
	errorDocs []errorDoc
	// metricPkgs emit metrics: every name, label key and label value
	// their code spells (and the driver's Reason*/Role* values) is in
	// their package documentation.
	metricPkgs []string
	// pgxPkg's Config fields each in the first column of the first
	// table under pgxSection of pgxDoc, exactly once ("" to skip).
	pgxPkg, pgxDoc, pgxSection string
	// readme must contain each of mustContain.
	readme      string
	mustContain []string
	// docGlobs are the pages whose links must resolve and whose
	// references to keys, Config and Stats fields must exist.
	docGlobs []string
}

type errorDoc struct{ pkg, doc string }

func defaultConfig(root string) config {
	var errs []errorDoc
	for _, p := range []string{".", "pgreplicahttp", "pgreplicajob", "pgreplicapgx", "pgreplicagrpc", "redisstore", "pgreplicaprom", "pgreplicaotel"} {
		errs = append(errs, errorDoc{p, "docs/errors.md"})
	}
	errs = append(errs, errorDoc{"integration", "docs/testing.md"})
	return config{
		root:            root,
		driverPkg:       ".",
		settingsDoc:     "docs/operations.md",
		settingsSection: "Settings",
		removedVar:      "removedOptions",
		removedSection:  "Removed settings",
		statsDoc:        "docs/operations.md",
		errorDocs:       errs,
		metricPkgs:      []string{"pgreplicaprom", "pgreplicaotel"},
		pgxPkg:          "pgreplicapgx",
		pgxDoc:          "docs/pgx.md",
		pgxSection:      "pgx's hooks: tracers, types, rotating passwords",
		readme:          "README.md",
		// The test command .ci/run runs: CI requires README to name it.
		mustContain: []string{"go test -race -count=1 -p 1 $(go list -m -f '{{.Dir}}/...')"},
		docGlobs:    []string{"README.md", "docs/*.md", "docs/pictures/*.md"},
	}
}

// problem is one finding: where (file:line, or a package) and what.
type problem struct{ where, what string }

func (p problem) String() string { return p.where + ": " + p.what }

type checker struct {
	cfg      config
	problems []problem
	md       map[string]*mdFile // by path relative to root
	driver   *goPackage
	// removed are the driver's removed DSN keys (config.removedVar).
	removed map[string]bool
}

func (c *checker) addf(where, format string, args ...any) {
	c.problems = append(c.problems, problem{where, fmt.Sprintf(format, args...)})
}

// check runs every rule and returns what it found, sorted.
func check(cfg config) []problem {
	c := &checker{cfg: cfg, md: map[string]*mdFile{}}
	if err := c.loadDocs(); err != nil {
		return []problem{{cfg.root, err.Error()}}
	}
	driver, err := loadPackage(c.abs(cfg.driverPkg))
	if err != nil {
		return []problem{{cfg.driverPkg, err.Error()}}
	}
	c.driver = driver
	c.removed = c.removedKeys()
	keys, fields := c.checkSettings()
	c.checkRemoved()
	stats := c.checkStats()
	c.checkErrors()
	c.checkMetrics()
	c.checkPgxConfig()
	c.checkReferences(keys, fields, stats)
	c.checkLinks()
	c.checkReadme()
	sort.SliceStable(c.problems, func(i, j int) bool { return c.problems[i].where < c.problems[j].where })
	return c.problems
}

func (c *checker) abs(rel string) string { return filepath.Join(c.cfg.root, filepath.FromSlash(rel)) }

func (c *checker) loadDocs() error {
	for _, g := range c.cfg.docGlobs {
		matches, err := filepath.Glob(c.abs(g))
		if err != nil {
			return err
		}
		for _, m := range matches {
			rel, _ := filepath.Rel(c.cfg.root, m)
			if _, err := c.doc(filepath.ToSlash(rel)); err != nil {
				return err
			}
		}
	}
	return nil
}

// doc returns the Markdown file at rel, read once.
func (c *checker) doc(rel string) (*mdFile, error) {
	if f, ok := c.md[rel]; ok {
		return f, nil
	}
	b, err := os.ReadFile(c.abs(rel))
	if err != nil {
		return nil, err
	}
	f := parseMarkdown(rel, string(b))
	c.md[rel] = f
	return f, nil
}

// pages returns the checked pages in path order.
func (c *checker) pages() []*mdFile {
	var out []*mdFile
	for _, k := range sortedKeys(c.md) {
		out = append(out, c.md[k])
	}
	return out
}

var (
	dsnKey     = regexp.MustCompile(`^pgreplica_[a-z0-9_]+$`)
	exportedID = regexp.MustCompile(`^[A-Z][A-Za-z0-9_]*$`)
)

// checkSettings holds the settings table to the DSN keys and Config
// fields the code has, and returns both sets.
func (c *checker) checkSettings() (keys, fields map[string]bool) {
	keys, fields = map[string]bool{}, map[string]bool{}
	for _, k := range c.driver.stringLiterals(dsnKey) {
		if !c.removed[k] {
			keys[k] = true
		}
	}
	if len(keys) == 0 {
		c.addf(c.cfg.driverPkg, "found no pgreplica_* key in the driver's code: the checker no longer knows where the keys are listed")
	}
	list, ok := c.driver.structFields("Config")
	if !ok || len(list) == 0 {
		c.addf(c.cfg.driverPkg, "found no Config struct with exported fields")
	}
	for _, f := range list {
		fields[f] = true
	}
	doc, err := c.doc(c.cfg.settingsDoc)
	if err != nil {
		c.addf(c.cfg.settingsDoc, "%v", err)
		return keys, fields
	}
	start, end, ok := doc.section(c.cfg.settingsSection)
	rows := doc.firstTable(start, end)
	if !ok || len(rows) == 0 {
		c.addf(c.cfg.settingsDoc, "no table under a heading %q", c.cfg.settingsSection)
		return keys, fields
	}
	keyRows, fieldRows := map[string][]int{}, map[string][]int{}
	for _, r := range rows {
		if len(r.cells) < 2 {
			c.addf(fmt.Sprintf("%s:%d", doc.path, r.line), "a settings row needs a DSN key column and a Config field column")
			continue
		}
		for _, s := range codeSpans(r.cells[0]) {
			if dsnKey.MatchString(s) {
				keyRows[s] = append(keyRows[s], r.line)
			}
		}
		for _, s := range codeSpans(r.cells[1]) {
			if exportedID.MatchString(s) {
				fieldRows[s] = append(fieldRows[s], r.line)
			}
		}
	}
	at := func(lines []int) string { return fmt.Sprintf("%s:%d", doc.path, lines[0]) }
	for _, k := range sortedKeys(keys) {
		switch n := len(keyRows[k]); {
		case n == 0:
			c.addf(doc.path, "the DSN key %s (ParseDSN accepts it) is not in the %q table", k, c.cfg.settingsSection)
		case n > 1:
			c.addf(at(keyRows[k]), "the DSN key %s is documented %d times in the %q table (lines %v); once is the rule", k, n, c.cfg.settingsSection, keyRows[k])
		}
	}
	for _, k := range sortedKeys(keyRows) {
		switch {
		case c.removed[k]:
			c.addf(at(keyRows[k]), "the %q table documents %s, which was removed (%s); it belongs under %q", c.cfg.settingsSection, k, c.cfg.removedVar, c.cfg.removedSection)
		case !keys[k]:
			c.addf(at(keyRows[k]), "the %q table documents %s, which is no DSN key of the driver", c.cfg.settingsSection, k)
		}
	}
	for _, f := range list {
		switch n := len(fieldRows[f]); {
		case n == 0:
			c.addf(doc.path, "the Config field %s is not in the %q table", f, c.cfg.settingsSection)
		case n > 1:
			c.addf(at(fieldRows[f]), "the Config field %s is documented %d times in the %q table (lines %v); once is the rule", f, n, c.cfg.settingsSection, fieldRows[f])
		}
	}
	for _, f := range sortedKeys(fieldRows) {
		if !fields[f] {
			c.addf(at(fieldRows[f]), "the %q table documents Config.%s, which Config does not have", c.cfg.settingsSection, f)
		}
	}
	return keys, fields
}

// removedKeys returns the keys of the driver's map of removed DSN keys.
func (c *checker) removedKeys() map[string]bool {
	out := map[string]bool{}
	if c.cfg.removedVar == "" {
		return out
	}
	list, ok := c.driver.mapKeys(c.cfg.removedVar, dsnKey)
	if !ok {
		c.addf(c.cfg.driverPkg, "found no variable %s (the removed DSN keys): the checker no longer knows which keys were removed", c.cfg.removedVar)
	}
	for _, k := range list {
		out[k] = true
	}
	return out
}

// removedLines returns the lines [start, end) of the removed settings'
// section of the settings doc; ok is false without one.
func (c *checker) removedLines() (start, end int, ok bool) {
	doc, err := c.doc(c.cfg.settingsDoc)
	if err != nil || c.cfg.removedSection == "" {
		return 0, 0, false
	}
	return doc.section(c.cfg.removedSection)
}

// checkRemoved wants each removed DSN key named in the removed settings'
// section, with what took its place.
func (c *checker) checkRemoved() {
	if len(c.removed) == 0 {
		return
	}
	start, end, ok := c.removedLines()
	if !ok {
		c.addf(c.cfg.settingsDoc, "no section %q for the removed DSN keys (%s)", c.cfg.removedSection, strings.Join(sortedKeys(c.removed), ", "))
		return
	}
	doc, _ := c.doc(c.cfg.settingsDoc)
	named := map[string]bool{}
	for i := start; i < end; i++ {
		for _, m := range keyRef.FindAllStringSubmatch(doc.lines[i], -1) {
			named[m[1]] = true
		}
	}
	for _, k := range sortedKeys(c.removed) {
		if !named[k] {
			c.addf(doc.path, "the removed DSN key %s (%s) is not in the section %q", k, c.cfg.removedVar, c.cfg.removedSection)
		}
	}
}

// checkStats wants every Stats field named in the stats doc, and returns
// the fields.
func (c *checker) checkStats() map[string]bool {
	out := map[string]bool{}
	list, ok := c.driver.structFields("Stats")
	if !ok || len(list) == 0 {
		c.addf(c.cfg.driverPkg, "found no Stats struct with exported fields")
		return out
	}
	doc, err := c.doc(c.cfg.statsDoc)
	if err != nil {
		c.addf(c.cfg.statsDoc, "%v", err)
		return out
	}
	text := doc.text()
	for _, f := range list {
		out[f] = true
		if !mentions(text, f) {
			c.addf(doc.path, "the Stats field %s is not mentioned", f)
		}
	}
	return out
}

// checkErrors wants every exported error of each package in its doc.
func (c *checker) checkErrors() {
	found := 0
	for _, e := range c.cfg.errorDocs {
		p, err := loadPackage(c.abs(e.pkg))
		if err != nil {
			c.addf(e.pkg, "%v", err)
			continue
		}
		doc, err := c.doc(e.doc)
		if err != nil {
			c.addf(e.doc, "%v", err)
			continue
		}
		text := doc.text()
		for _, name := range p.exportedErrors() {
			found++
			if !mentions(text, name) {
				c.addf(doc.path, "the exported error %s (package %s) is not mentioned", name, e.pkg)
			}
		}
	}
	if found == 0 && len(c.cfg.errorDocs) > 0 {
		c.addf(c.cfg.driverPkg, "found no exported error (Err… variable, …Error type) at all")
	}
}

var (
	// metricWord is what a metrics package's code spells as a metric
	// name, an attribute or label key or value, or a unit ({read}).
	metricWord = regexp.MustCompile(`^\{?[a-z][a-z0-9_.]*\}?$`)
	labelConst = regexp.MustCompile(`^(Reason|Role)[A-Z]\w*$`)
	docToken   = regexp.MustCompile(`[a-z0-9_.]+`)
)

// checkMetrics wants each word a metrics package emits in its package
// documentation: metric names (with its DefaultNamespace prefix, if it
// has one), label keys and values, and the driver's Reason* and Role*
// values, which reach the labels through Stats and NodeStatus.
func (c *checker) checkMetrics() {
	fromDriver := c.driver.stringConstants(labelConst)
	if len(c.cfg.metricPkgs) > 0 && len(fromDriver) == 0 {
		c.addf(c.cfg.driverPkg, "found no Reason*/Role* string constant: the checker no longer knows the label values Stats carries")
	}
	for _, dir := range c.cfg.metricPkgs {
		p, err := loadPackage(c.abs(dir))
		if err != nil {
			c.addf(dir, "%v", err)
			continue
		}
		doc := p.packageDoc()
		if doc == "" {
			c.addf(dir, "no package documentation")
			continue
		}
		tokens := map[string]bool{}
		for _, t := range docToken.FindAllString(doc, -1) {
			tokens[strings.TrimRight(t, ".")] = true
		}
		prefixes := []string{""}
		if ns, ok := p.stringConstants(regexp.MustCompile(`^DefaultNamespace$`))["DefaultNamespace"]; ok && ns != "" {
			prefixes = append(prefixes, ns+"_")
		}
		words := map[string]string{}
		for _, w := range p.stringLiterals(metricWord) {
			words[strings.Trim(w, "{}")] = "its code"
		}
		for name, v := range fromDriver {
			words[v] = "the driver's " + name
		}
		if len(words) == 0 {
			c.addf(dir, "found no metric name or label in the code")
		}
		for _, w := range sortedKeys(words) {
			ok := false
			for _, pre := range prefixes {
				ok = ok || tokens[pre+w]
			}
			if !ok {
				c.addf(dir+"/doc.go", "%q (from %s) is emitted but not in the package documentation", w, words[w])
			}
		}
	}
}

// checkPgxConfig wants every field of the pgx package's Config in the
// first column of its table, once.
func (c *checker) checkPgxConfig() {
	if c.cfg.pgxPkg == "" {
		return
	}
	p, err := loadPackage(c.abs(c.cfg.pgxPkg))
	if err != nil {
		c.addf(c.cfg.pgxPkg, "%v", err)
		return
	}
	list, ok := p.structFields("Config")
	if !ok {
		c.addf(c.cfg.pgxPkg, "found no Config struct")
		return
	}
	doc, err := c.doc(c.cfg.pgxDoc)
	if err != nil {
		c.addf(c.cfg.pgxDoc, "%v", err)
		return
	}
	start, end, ok := doc.section(c.cfg.pgxSection)
	rows := doc.firstTable(start, end)
	if !ok || len(rows) == 0 {
		c.addf(doc.path, "no table under a heading %q", c.cfg.pgxSection)
		return
	}
	seen := map[string][]int{}
	for _, r := range rows {
		for _, s := range codeSpans(r.cells[0]) {
			if exportedID.MatchString(s) {
				seen[s] = append(seen[s], r.line)
			}
		}
	}
	have := map[string]bool{}
	for _, f := range list {
		have[f] = true
		if n := len(seen[f]); n != 1 {
			c.addf(doc.path, "%s.Config.%s is documented %d times in the %q table; once is the rule", path.Base(c.cfg.pgxPkg), f, n, c.cfg.pgxSection)
		}
	}
	for _, f := range sortedKeys(seen) {
		if !have[f] {
			c.addf(fmt.Sprintf("%s:%d", doc.path, seen[f][0]), "the table documents %s.Config.%s, which does not exist", path.Base(c.cfg.pgxPkg), f)
		}
	}
}

var (
	keyRef      = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.])(pgreplica_[a-z0-9_]+)`)
	configRef   = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.])(?:pgreplica\.)?(?:Config|Routing)\.([A-Z][A-Za-z0-9_]*)`)
	statsRef    = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.])(?:pgreplica\.)?Stats(?:\(\))?\.([A-Z][A-Za-z0-9_]*)`)
	promSuffix  = regexp.MustCompile(`_(bucket|sum|count)$`)
	otherPrefix = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.])(?:pgreplicapgx|pgxpool|gorm|postgres|pgx)\.Config\.`)
)

// checkReferences wants every pgreplica_* word of the pages to be a DSN
// key or a Prometheus metric name, and every Config.X and Stats.X to
// name a field that exists.
func (c *checker) checkReferences(keys, fields, stats map[string]bool) {
	metrics := map[string]bool{}
	for _, dir := range c.cfg.metricPkgs {
		p, err := loadPackage(c.abs(dir))
		if err != nil {
			continue // reported by checkMetrics
		}
		if ns, ok := p.stringConstants(regexp.MustCompile(`^DefaultNamespace$`))["DefaultNamespace"]; ok && ns != "" {
			for _, w := range p.stringLiterals(regexp.MustCompile(`^[a-z][a-z0-9_]*$`)) {
				metrics[ns+"_"+w] = true
			}
		}
	}
	rmStart, rmEnd, _ := c.removedLines()
	for _, f := range c.pages() {
		for i, l := range f.lines {
			where := fmt.Sprintf("%s:%d", f.path, i+1)
			for _, m := range keyRef.FindAllStringSubmatch(l, -1) {
				w := m[1]
				if c.removed[w] {
					if f.path != c.cfg.settingsDoc || i < rmStart || i >= rmEnd {
						c.addf(where, "%s was removed: only the section %q of %s names it; say what happens now instead", w, c.cfg.removedSection, c.cfg.settingsDoc)
					}
					continue
				}
				if !keys[w] && !metrics[w] && !metrics[promSuffix.ReplaceAllString(w, "")] {
					c.addf(where, "%s is neither a DSN key of the driver nor a metric of its collector", w)
				}
			}
			if len(fields) > 0 {
				masked := otherPrefix.ReplaceAllString(l, " ")
				for _, m := range configRef.FindAllStringSubmatch(masked, -1) {
					if !fields[m[1]] {
						c.addf(where, "Config.%s: Config has no such field", m[1])
					}
				}
			}
			if len(stats) > 0 {
				for _, m := range statsRef.FindAllStringSubmatch(l, -1) {
					if !stats[m[1]] {
						c.addf(where, "Stats.%s: Stats has no such field", m[1])
					}
				}
			}
		}
	}
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// checkLinks wants every relative link of the pages to reach a file or
// directory of the repository, and its #anchor a heading of that page.
func (c *checker) checkLinks() {
	for _, f := range c.pages() {
		for _, l := range f.links() {
			t := l.target
			if scheme.MatchString(t) || strings.HasPrefix(t, "//") {
				continue
			}
			where := fmt.Sprintf("%s:%d", f.path, l.line)
			file, anchor, _ := strings.Cut(t, "#")
			rel := f.path
			if file != "" {
				rel = path.Clean(path.Join(path.Dir(f.path), file))
				if rel == ".." || strings.HasPrefix(rel, "../") {
					c.addf(where, "link %s leaves the repository", t)
					continue
				}
				if _, err := os.Stat(c.abs(rel)); err != nil {
					c.addf(where, "link %s: %s does not exist", t, rel)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(rel, ".md") {
				continue
			}
			target, err := c.doc(rel)
			if err != nil {
				c.addf(where, "link %s: %v", t, err)
				continue
			}
			if !target.anchors()[anchor] {
				c.addf(where, "link %s: %s has no heading with the anchor #%s", t, rel, anchor)
			}
		}
	}
}

func (c *checker) checkReadme() {
	if c.cfg.readme == "" {
		return
	}
	f, err := c.doc(c.cfg.readme)
	if err != nil {
		c.addf(c.cfg.readme, "%v", err)
		return
	}
	text := f.text()
	for _, s := range c.cfg.mustContain {
		if !strings.Contains(text, s) {
			c.addf(f.path, "does not contain %q", s)
		}
	}
}

// mentions reports whether text has name as a whole word.
func mentions(text, name string) bool {
	return regexp.MustCompile(`(?:^|[^A-Za-z0-9_])` + regexp.QuoteMeta(name) + `(?:[^A-Za-z0-9_]|$)`).MatchString(text)
}
