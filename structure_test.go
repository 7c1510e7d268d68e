package pgreplica

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The structure of the root package, measured so that it cannot knot
// further unnoticed: which files reference which (a package-level name,
// method or field one uses that the other declares), the largest cycle
// of such references, the pairs of files that reference each other, and
// the files that hold *Connector methods. The bars are the measures of
// today; a change that layers the package lowers them. The cycle rose
// from 37 to 41 when files that held several concepts were split (lease,
// in-flight reads, status, node sets): each new file joined the cycle its
// parent was in; the mutual pairs fell from 55 to 32.
const (
	maxLargestCycle   = 41
	maxMutualPairs    = 22
	maxConnectorFiles = 15
)

// TestStructure measures the root package's file graph against the bars.
func TestStructure(t *testing.T) {
	g := fileGraph(t)
	cycle := largestCycle(g)
	pairs := mutualPairs(g)
	connFiles := connectorMethodFiles(t)
	t.Logf("%d files; largest reference cycle %d files; %d mutual pairs; *Connector methods in %d files",
		len(g), len(cycle), len(pairs), len(connFiles))
	t.Logf("outside the largest cycle: %v", outside(g, cycle))
	if len(cycle) > maxLargestCycle {
		t.Errorf("the largest reference cycle has %d files, bar %d: %v", len(cycle), maxLargestCycle, cycle)
	}
	if len(pairs) > maxMutualPairs {
		t.Errorf("%d pairs of files reference each other, bar %d", len(pairs), maxMutualPairs)
	}
	if len(connFiles) > maxConnectorFiles {
		t.Errorf("*Connector methods in %d files, bar %d: %v", len(connFiles), maxConnectorFiles, connFiles)
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
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
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

func outside(g map[string]map[string]bool, cycle []string) []string {
	var out []string
	for f := range g {
		if !slices.Contains(cycle, f) {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// emptyImporter gives every import an empty package.
type emptyImporter struct{}

func (emptyImporter) Import(path string) (*types.Package, error) {
	p := types.NewPackage(path, filepath.Base(path))
	p.MarkComplete()
	return p, nil
}
