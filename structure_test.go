package pgreplica

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The structure of the root package, measured so that it cannot knot
// again unnoticed: which files reference which (a package-level name,
// method or field one uses that the other declares), the largest cycle
// of such references, the pairs of files that reference each other, the
// files that hold *Connector methods, and the layer of every file, each
// of which references only its own layer and those below it
// (docs/architecture.md):
//
//   - doors: the public face, both front doors and the Connector, which
//     makes its parts and starts and stops them;
//   - router: decide, borrow, run, account (the router type and its
//     files);
//   - world: what the router routes over, per handle (nodes, servers,
//     pools, connections, the topology, the monitor, the wire) and per
//     session;
//   - values: settings, positions, tokens, errors, counters.
//
// A new file must be given its layer here.
const (
	maxLargestCycle   = 6
	maxMutualPairs    = 15
	maxConnectorFiles = 4
)

// The layers, top down, and their files.
var layers = []struct {
	name  string
	files []string
}{
	{"doors", []string{"driver.go", "connectorof.go", "connector.go", "resolve.go", "conn.go", "stmt.go", "tx.go",
		"pgxdoor.go", "status.go", "tokencheck.go"}},
	{"router", []string{"router.go", "route.go", "plan.go", "acquire.go", "lease.go", "inflight.go", "fresh.go",
		"replaycheck.go", "visibility.go", "hedge.go", "capture.go", "replicated.go", "unwritten.go", "fallback.go", "selector.go",
		"readerrors.go"}},
	{"world", []string{"monitor.go", "subscriber.go", "privilege.go", "topology.go", "watermark.go", "session.go",
		"ctxtoken.go", "node.go", "flightages.go", "server.go", "pool.go", "physical.go", "wire.go", "wire_pgx.go", "wire_pq.go"}},
	{"values", []string{"config.go", "dsn.go", "patroni.go", "pgxhooks.go", "picker.go", "token.go", "lsn.go", "nodeset.go",
		"errors.go", "metrics.go", "stats.go"}},
}

// TestStructure measures the root package's file graph against the bars.
func TestStructure(t *testing.T) {
	g := fileGraph(t)
	cycle := largestCycle(g)
	pairs := mutualPairs(g)
	connFiles := connectorMethodFiles(t)
	t.Logf("%d files; largest reference cycle %d files; %d mutual pairs; *Connector methods in %d files",
		len(g), len(cycle), len(pairs), len(connFiles))
	t.Logf("the largest cycle: %v", cycle)
	if len(cycle) > maxLargestCycle {
		t.Errorf("the largest reference cycle has %d files, bar %d: %v", len(cycle), maxLargestCycle, cycle)
	}
	if len(pairs) > maxMutualPairs {
		t.Errorf("%d pairs of files reference each other, bar %d: %v", len(pairs), maxMutualPairs, pairs)
	}
	if len(connFiles) > maxConnectorFiles {
		t.Errorf("*Connector methods in %d files, bar %d: %v", len(connFiles), maxConnectorFiles, connFiles)
	}
}

// TestLayers checks that every file has a layer and references no file
// of a layer above its own.
func TestLayers(t *testing.T) {
	layer := map[string]int{}
	for i, l := range layers {
		for _, f := range l.files {
			layer[f] = i
		}
	}
	g := fileGraph(t)
	var files []string
	for f := range g {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		lf, ok := layer[f]
		if !ok {
			t.Errorf("%s has no layer: add it to layers in structure_test.go", f)
			continue
		}
		var up []string
		for to := range g[f] {
			if lt, ok := layer[to]; ok && lt < lf {
				up = append(up, to+" ("+layers[lt].name+")")
			}
		}
		sort.Strings(up)
		if len(up) > 0 {
			t.Errorf("%s (%s) references a layer above its own: %v", f, layers[lf].name, up)
		}
	}
	for f := range layer {
		if _, ok := g[f]; !ok {
			t.Errorf("layers names %s, which is not a file of the package", f)
		}
	}
}

// rootFiles parses the package's non-test files.
func rootFiles(t *testing.T) (*token.FileSet, []*ast.File) {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return fset, files
}

// fileGraph returns, for each file, the files whose declarations it uses.
// The package is type-checked alone: what it imports is left empty, and
// the type errors that follow are ignored (only the package's own
// objects matter here, and a use through an imported type's value, rare
// in this package, is missed).
func fileGraph(t *testing.T) map[string]map[string]bool {
	t.Helper()
	fset, files := rootFiles(t)
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: emptyImporter{}, Error: func(error) {}}
	pkg, _ := conf.Check("github.com/pgreplica/pgreplica", fset, files, info)
	g := map[string]map[string]bool{}
	for _, f := range files {
		g[fset.Position(f.Pos()).Filename] = map[string]bool{}
	}
	declaredIn := func(obj types.Object) string {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			return ""
		}
		if v, ok := obj.(*types.Var); ok && !v.IsField() && obj.Parent() != pkg.Scope() {
			return "" // a local variable
		}
		if _, ok := obj.(*types.Func); !ok && obj.Parent() != nil && obj.Parent() != pkg.Scope() {
			return "" // a local type or constant
		}
		return fset.Position(obj.Pos()).Filename
	}
	add := func(at token.Pos, obj types.Object) {
		from, to := fset.Position(at).Filename, declaredIn(obj)
		if to != "" && to != from {
			g[from][to] = true
		}
	}
	for id, obj := range info.Uses {
		add(id.Pos(), obj)
	}
	for sel, s := range info.Selections {
		add(sel.Sel.Pos(), s.Obj())
	}
	// A name inside an expression that failed to type-check (a type
	// argument of an imported generic type, atomic.Pointer[node], whose
	// package is empty here) is in no Uses: take it by its name from the
	// package's scope. Field and method names (selectors, and the keys
	// of composite literals) are not taken this way; they are found
	// through their types above.
	for _, f := range files {
		selected := map[*ast.Ident]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			if se, ok := n.(*ast.SelectorExpr); ok {
				selected[se.Sel] = true
			}
			if kv, ok := n.(*ast.KeyValueExpr); ok {
				if key, ok := kv.Key.(*ast.Ident); ok {
					selected[key] = true // a field of a literal of an imported type, maybe
				}
			}
			id, ok := n.(*ast.Ident)
			if ok && !selected[id] && info.Uses[id] == nil && info.Defs[id] == nil {
				if obj := pkg.Scope().Lookup(id.Name); obj != nil {
					add(id.Pos(), obj)
				}
			}
			return true
		})
	}
	return g
}

// largestCycle returns the files of the largest strongly connected
// component of g (Tarjan's algorithm), sorted.
func largestCycle(g map[string]map[string]bool) []string {
	index, low := map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack, best []string
	next := 0
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for w := range g[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var comp []string
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			comp = append(comp, w)
			if w == v {
				break
			}
		}
		if len(comp) > len(best) {
			best = comp
		}
	}
	var files []string
	for v := range g {
		files = append(files, v)
	}
	sort.Strings(files)
	for _, v := range files {
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	sort.Strings(best)
	return best
}

// mutualPairs returns the pairs of files that reference each other.
func mutualPairs(g map[string]map[string]bool) []string {
	var pairs []string
	for a, uses := range g {
		for b := range uses {
			if a < b && g[b][a] {
				pairs = append(pairs, a+" ~ "+b)
			}
		}
	}
	sort.Strings(pairs)
	return pairs
}

// connectorMethodFiles returns the files that declare methods of
// *Connector.
func connectorMethodFiles(t *testing.T) []string {
	t.Helper()
	fset, files := rootFiles(t)
	var out []string
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "Connector" {
					out = append(out, fset.Position(f.Pos()).Filename)
					break
				}
			}
		}
	}
	return out
}

// emptyImporter gives every import an empty package.
type emptyImporter struct{}

func (emptyImporter) Import(path string) (*types.Package, error) {
	p := types.NewPackage(path, filepath.Base(path))
	p.MarkComplete()
	return p, nil
}
