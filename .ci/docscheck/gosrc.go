package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// goPackage is the non-test Go files of one directory, parsed.
type goPackage struct {
	dir   string
	files []*ast.File
}

// loadPackage parses the non-test .go files of dir (comments kept).
func loadPackage(dir string) (*goPackage, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	p := &goPackage{dir: dir}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, f)
	}
	if len(p.files) == 0 {
		return nil, fmt.Errorf("%s: no Go files", dir)
	}
	return p, nil
}

// stringLiterals returns the distinct values of the string literals of
// p's code (import paths left out) that match re, sorted.
func (p *goPackage) stringLiterals(re *regexp.Regexp) []string {
	seen := map[string]bool{}
	for _, f := range p.files {
		imports := map[*ast.BasicLit]bool{}
		for _, imp := range f.Imports {
			imports[imp.Path] = true
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING || imports[lit] {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err == nil && re.MatchString(s) {
				seen[s] = true
			}
			return true
		})
	}
	return sortedKeys(seen)
}

// mapKeys returns the string-literal keys that match re of the map
// literal a package-level variable named name is set to, sorted; ok is
// false when p declares no such variable.
func (p *goPackage) mapKeys(name string, re *regexp.Regexp) (keys []string, ok bool) {
	seen := map[string]bool{}
	for _, f := range p.files {
		for _, d := range f.Decls {
			gd, isGen := d.(*ast.GenDecl)
			if !isGen || gd.Tok != token.VAR {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if n.Name != name || i >= len(vs.Values) {
						continue
					}
					ok = true
					lit, isLit := vs.Values[i].(*ast.CompositeLit)
					if !isLit {
						continue
					}
					for _, e := range lit.Elts {
						kv, isKV := e.(*ast.KeyValueExpr)
						if !isKV {
							continue
						}
						k, isStr := kv.Key.(*ast.BasicLit)
						if !isStr || k.Kind != token.STRING {
							continue
						}
						if v, err := strconv.Unquote(k.Value); err == nil && re.MatchString(v) {
							seen[v] = true
						}
					}
				}
			}
		}
	}
	return sortedKeys(seen), ok
}

// structFields returns the exported field names of struct type name
// (an embedded field by its type's name), in declaration order; ok is
// false when p declares no such struct.
func (p *goPackage) structFields(name string) (fields []string, ok bool) {
	for _, f := range p.files {
		for _, d := range f.Decls {
			gd, isGen := d.(*ast.GenDecl)
			if !isGen || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				ts := s.(*ast.TypeSpec)
				st, isStruct := ts.Type.(*ast.StructType)
				if ts.Name.Name != name || !isStruct {
					continue
				}
				for _, fl := range st.Fields.List {
					if len(fl.Names) == 0 {
						if id := embeddedName(fl.Type); id != "" && ast.IsExported(id) {
							fields = append(fields, id)
						}
						continue
					}
					for _, n := range fl.Names {
						if n.IsExported() {
							fields = append(fields, n.Name)
						}
					}
				}
				return fields, true
			}
		}
	}
	return nil, false
}

func embeddedName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.StarExpr:
		return embeddedName(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	}
	return ""
}

var (
	errVarName  = regexp.MustCompile(`^Err[A-Z0-9]\w*$`)
	errTypeName = regexp.MustCompile(`^[A-Z]\w*Error$`)
)

// exportedErrors returns p's exported error values (package-level
// variables named Err…) and error types (exported types named …Error),
// sorted.
func (p *goPackage) exportedErrors() []string {
	seen := map[string]bool{}
	for _, f := range p.files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range gd.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					if gd.Tok != token.VAR {
						continue
					}
					for _, n := range s.Names {
						if errVarName.MatchString(n.Name) {
							seen[n.Name] = true
						}
					}
				case *ast.TypeSpec:
					if errTypeName.MatchString(s.Name.Name) {
						seen[s.Name.Name] = true
					}
				}
			}
		}
	}
	return sortedKeys(seen)
}

// stringConstants returns the values of p's package-level string
// constants whose names match re, by name.
func (p *goPackage) stringConstants(re *regexp.Regexp) map[string]string {
	out := map[string]string{}
	for _, f := range p.files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !re.MatchString(n.Name) || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					if v, err := strconv.Unquote(lit.Value); err == nil {
						out[n.Name] = v
					}
				}
			}
		}
	}
	return out
}

// packageDoc returns the text of p's package comment(s).
func (p *goPackage) packageDoc() string {
	var b strings.Builder
	for _, f := range p.files {
		if f.Doc != nil {
			b.WriteString(f.Doc.Text())
			b.WriteString("\n")
		}
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
