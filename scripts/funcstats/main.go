// Command funcstats measures the size of the repository's functions, the way issue #15 states its bar:
// lines per function, parameters per function and cyclomatic complexity (gocyclo's count: 1, plus one per
// if, for, range, non-default case or select clause, && and ||; function literals count toward the function
// that holds them). Test files and generated files are left out.
//
//	go run ./scripts/funcstats            # the table and the longest functions
//	go run ./scripts/funcstats -check     # exit 1 when a function breaks a limit (scripts/test.sh runs this)
package main

import (
	"cmp"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Limits are the bar of issue #15, per function. There is no limit on a mean: a mean is moved by splitting
// functions that read better whole (issue 28), so the table reports it without holding the code to it.
type limits struct {
	maxLines, maxParams, maxCyclo int
}

var bar = limits{maxLines: 60, maxParams: 5, maxCyclo: 15}

type function struct {
	name                 string
	pos                  token.Position
	lines, params, cyclo int
}

func main() {
	check := flag.Bool("check", false, "exit 1 when a function breaks a limit")
	top := flag.Int("top", 10, "list this many of the longest and the most complex functions")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	funcs, err := measure(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "funcstats:", err)
		os.Exit(2)
	}
	broken := report(os.Stdout, funcs, *top)
	if *check && broken > 0 {
		fmt.Fprintf(os.Stderr, "funcstats: %d limits broken (lines <= %d, params <= %d, cyclomatic <= %d)\n",
			broken, bar.maxLines, bar.maxParams, bar.maxCyclo)
		os.Exit(1)
	}
}

// measure parses every non-test Go file under root.
func measure(root string) ([]function, error) {
	var funcs []function
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || skippedDir(root, path, d) {
			return cmp.Or(err, filepath.SkipDir)
		}
		if d.IsDir() || !isSource(path) {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err == nil && !ast.IsGenerated(file) {
			funcs = append(funcs, fileFuncs(fset, file)...)
		}
		return err
	})
	return funcs, err
}

// skippedDir: hidden directories, test data and benchmark results.
func skippedDir(root, path string, d fs.DirEntry) bool {
	name := d.Name()
	return d.IsDir() && path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "results")
}

func isSource(path string) bool {
	return strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go")
}

func fileFuncs(fset *token.FileSet, file *ast.File) []function {
	var funcs []function
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
		funcs = append(funcs, function{
			name:   funcName(fn),
			pos:    start,
			lines:  end.Line - start.Line + 1,
			params: fn.Type.Params.NumFields(),
			cyclo:  cyclomatic(fn.Body),
		})
	}
	return funcs
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if index, ok := t.(*ast.IndexExpr); ok {
		t = index.X
	}
	if ident, ok := t.(*ast.Ident); ok {
		return ident.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

func cyclomatic(body ast.Node) int {
	n := 1
	ast.Inspect(body, func(node ast.Node) bool {
		n += branches(node)
		return true
	})
	return n
}

// branches is what a node adds to the cyclomatic complexity.
func branches(node ast.Node) int {
	switch node := node.(type) {
	case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
		return 1
	case *ast.CaseClause:
		return count(node.List != nil)
	case *ast.CommClause:
		return count(node.Comm != nil)
	case *ast.BinaryExpr:
		return count(node.Op == token.LAND || node.Op == token.LOR)
	}
	return 0
}

func count(b bool) int {
	if b {
		return 1
	}
	return 0
}

// totals sums the functions up.
type totals struct {
	lines, cyclo, maxCyclo int
	long, many, complex    int // functions over the limits
}

func sum(funcs []function) totals {
	var t totals
	for _, f := range funcs {
		t.lines += f.lines
		t.cyclo += f.cyclo
		t.maxCyclo = max(t.maxCyclo, f.cyclo)
		t.long += count(f.lines > bar.maxLines)
		t.many += count(f.params > bar.maxParams)
		t.complex += count(f.cyclo > bar.maxCyclo)
	}
	return t
}

// report prints the summary and the offenders and returns how many limits the functions break.
func report(w *os.File, funcs []function, top int) int {
	t := sum(funcs)
	n := float64(max(len(funcs), 1))
	mean := float64(t.cyclo) / n
	fmt.Fprintln(w, "| functions | mean lines | over 60 lines | mean cyclomatic | max | over 5 parameters |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	fmt.Fprintf(w, "| %d | %.1f | %d | %.2f | %d | %d |\n\n", len(funcs), float64(t.lines)/n, t.long, mean, t.maxCyclo, t.many)

	offenders(w, funcs)
	list(w, "longest", funcs, top, func(f function) int { return f.lines })
	list(w, "most complex", funcs, top, func(f function) int { return f.cyclo })
	list(w, "most parameters", funcs, min(top, 5), func(f function) int { return f.params })
	return t.long + t.many + t.complex
}

func offenders(w *os.File, funcs []function) {
	for _, f := range funcs {
		if f.lines > bar.maxLines || f.params > bar.maxParams || f.cyclo > bar.maxCyclo {
			fmt.Fprintf(w, "over a limit: %s %s:%d (%d lines, %d parameters, cyclomatic %d)\n",
				f.name, f.pos.Filename, f.pos.Line, f.lines, f.params, f.cyclo)
		}
	}
}

func list(w *os.File, title string, funcs []function, top int, key func(function) int) {
	if top == 0 {
		return
	}
	sorted := append([]function(nil), funcs...)
	sort.SliceStable(sorted, func(i, j int) bool { return key(sorted[i]) > key(sorted[j]) })
	fmt.Fprintf(w, "%s:\n", title)
	for _, f := range sorted[:min(top, len(sorted))] {
		fmt.Fprintf(w, "  %4d  %-40s %s:%d\n", key(f), f.name, f.pos.Filename, f.pos.Line)
	}
}
