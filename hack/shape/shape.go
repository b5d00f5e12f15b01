package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// The limits of the "small types" rule.
const (
	// MaxMethods is the most methods (value and pointer receivers together) a named type may have.
	MaxMethods = 15
	// MaxFuncLines is the most lines a function or method may span, func line to closing brace.
	MaxFuncLines = 80
)

// skipDirs are the directories, relative to the root and slash-separated, whose files are
// not checked: the integration tests, stand-ins and bench, and the generated clientset.
var skipDirs = []string{"integration", "api/client"}

// Kind says which limit a Violation breaks.
type Kind string

// The kinds of Violation.
const (
	// TooManyMethods is a named type with more than MaxMethods methods.
	TooManyMethods Kind = "methods"
	// TooLong is a function or method spanning more than MaxFuncLines lines.
	TooLong Kind = "lines"
)

// Violation is one type or function over its limit.
type Violation struct {
	// File is the path of the file, relative to the checked root, slash-separated.
	File string
	// Line is the line of the type's declaration (or of its first method when the type is
	// declared elsewhere) or of the function's func keyword.
	Line int
	// Name is the type's name, the function's name, or Recv.Method for a method.
	Name string
	// Kind is the limit broken.
	Kind Kind
	// Count is the number of methods or lines.
	Count int
}

// String formats the violation as "file:line name count kind".
func (v Violation) String() string {
	return fmt.Sprintf("%s:%d %s %d %s", v.File, v.Line, v.Name, v.Count, v.Kind)
}

// CheckTree checks every non-test, non-generated Go file under root outside the skipped
// directories, package by package (a directory is a package), and returns the violations
// sorted by file, line and name.
func CheckTree(root string) ([]Violation, error) {
	byDir := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skippedDir(rel, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if checkedFile(d.Name()) {
			byDir[filepath.Dir(path)] = append(byDir[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, err)
	}
	var out []Violation
	for _, files := range byDir {
		vs, err := checkPackage(root, files)
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
	}
	sortViolations(out)
	return out, nil
}

// skippedDir reports whether the directory at rel (relative to the root) is left out.
func skippedDir(rel, name string) bool {
	if rel == "." {
		return false
	}
	if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
		return true
	}
	for _, s := range skipDirs {
		if rel == s {
			return true
		}
	}
	return false
}

// checkedFile reports whether a file of that name is checked: Go source, not a test and not
// a zz_generated file. Files marked "Code generated ... DO NOT EDIT." are left out later.
func checkedFile(name string) bool {
	return strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") &&
		!strings.HasPrefix(name, "zz_generated")
}

// checkPackage parses the files of one directory and returns their violations. Methods are
// counted per receiver type across all the files.
func checkPackage(root string, paths []string) ([]Violation, error) {
	fset := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse: %w", err)
		}
		if ast.IsGenerated(f) {
			continue
		}
		files = append(files, f)
	}
	return checkFiles(fset, root, files), nil
}

// typeCount collects the methods of one named type.
type typeCount struct {
	decl    token.Pos // the type's declaration, if it is in the checked files
	first   token.Pos // the first method seen, used when decl is unknown
	methods int
}

// checkFiles returns the violations in files, which make up one package parsed with fset.
func checkFiles(fset *token.FileSet, root string, files []*ast.File) []Violation {
	types := map[string]*typeCount{}
	get := func(name string) *typeCount {
		if types[name] == nil {
			types[name] = &typeCount{}
		}
		return types[name]
	}
	var out []Violation
	pos := func(p token.Pos) (string, int) {
		position := fset.Position(p)
		rel, err := filepath.Rel(root, position.Filename)
		if err != nil {
			rel = position.Filename
		}
		return filepath.ToSlash(rel), position.Line
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok {
						get(ts.Name.Name).decl = ts.Name.Pos()
					}
				}
			case *ast.FuncDecl:
				name := d.Name.Name
				if recv := receiverType(d); recv != "" {
					tc := get(recv)
					tc.methods++
					if !tc.first.IsValid() || d.Pos() < tc.first {
						tc.first = d.Pos()
					}
					name = recv + "." + name
				}
				if d.Body == nil {
					continue
				}
				start, end := fset.Position(d.Pos()).Line, fset.Position(d.End()).Line
				if n := end - start + 1; n > MaxFuncLines {
					file, line := pos(d.Pos())
					out = append(out, Violation{File: file, Line: line, Name: name, Kind: TooLong, Count: n})
				}
			}
		}
	}
	for name, tc := range types {
		if tc.methods <= MaxMethods {
			continue
		}
		at := tc.decl
		if !at.IsValid() {
			at = tc.first
		}
		file, line := pos(at)
		out = append(out, Violation{File: file, Line: line, Name: name, Kind: TooManyMethods, Count: tc.methods})
	}
	return out
}

// receiverType returns the name of the type a method is declared on (T for both T and *T,
// without type parameters), or "" for a plain function.
func receiverType(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return ""
	}
	t := d.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.ParenExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// sortViolations orders vs by file, line, name and kind.
func sortViolations(vs []Violation) {
	sort.Slice(vs, func(i, j int) bool {
		a, b := vs[i], vs[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Kind < b.Kind
	})
}
