package e2e

import (
	"fmt"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docs/architecture.md's package table says what each package imports of the product. go list holds the
// page to the code: a row whose imports differ from the package's, or a package of the product without a
// row (a directory row, "scripts/", covers the packages under it), fails here until the page says so.
func TestThePackageTableHoldsForTheImports(t *testing.T) {
	const product = "github.com/stockflow/stockflow/"
	actual := map[string][]string{} // package (path in the repository) -> its imports of the product, sorted
	for _, list := range [][]string{{"-C", "../..", "list"}, {"-C", "../../lockmw/rlock", "list"}} {
		// Output, not CombinedOutput: go list may say on stderr that it downloads a module (a fresh machine).
		out, err := exec.Command("go", append(list, "-f", `{{.ImportPath}}|{{join .Imports " "}}`, "./...")...).Output()
		if err != nil {
			t.Fatalf("go %v: %v", list, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkg, imports, _ := strings.Cut(line, "|")
			pkg = strings.TrimPrefix(pkg, product)
			if strings.Contains(pkg, "/internal/redistest") {
				continue // the lock module's own test rig
			}
			got := []string{}
			for _, imp := range strings.Fields(imports) {
				if rest, ok := strings.CutPrefix(imp, product); ok && !strings.Contains(rest, "/internal/redistest") {
					got = append(got, rest)
				}
			}
			slices.Sort(got)
			actual[pkg] = got
		}
	}
	table := section(t, doc(t, "architecture.md"), "## Packages")
	listed := map[string]bool{}
	var dirs []string
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		rows++
		paths := regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cells[1], -1)
		for _, m := range paths {
			if strings.HasSuffix(m[1], "/") {
				dirs = append(dirs, m[1])
			}
			listed[m[1]] = true
		}
		imports := strings.TrimSpace(cells[3])
		if len(paths) != 1 || strings.HasPrefix(imports, "(") {
			continue // several packages, or none: described, not checked
		}
		got, ok := actual[paths[0][1]]
		if !ok {
			if !strings.HasSuffix(paths[0][1], "/") && !strings.Contains(paths[0][1], ".") {
				t.Errorf("docs/architecture.md lists %s, which is no package of the product", paths[0][1])
			}
			continue
		}
		want := []string{}
		if imports != "-" {
			want = strings.Split(imports, ", ")
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s imports %v of the product; docs/architecture.md says %v: change the page with the code", paths[0][1], got, want)
		}
	}
	if rows < 20 {
		t.Fatalf("docs/architecture.md's package table has %d rows; is it still a table of | path | what | imports |?", rows)
	}
	for pkg := range actual {
		if !listed[pkg] && !slices.ContainsFunc(dirs, func(d string) bool { return strings.HasPrefix(pkg, d) }) {
			t.Errorf("package %s has no row in docs/architecture.md's package table", pkg)
		}
	}
}

// A producer publishes orders and reads the stock; it links neither the engine that decides orders
// (inventory, handlers) nor the locks (lockmw, lockmw/rlock): what cmd/producer builds from is what a team
// publishing orders in Go needs of stockflow.
func TestTheProducerLinksNoEngine(t *testing.T) {
	out, err := exec.Command("go", "-C", "../..", "list", "-deps", "./cmd/producer").Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/producer: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, engine := range []string{"inventory", "handlers", "lockmw", "lockmw/rlock"} {
		if slices.Contains(deps, "github.com/stockflow/stockflow/"+engine) {
			t.Errorf("cmd/producer links %s", engine)
		}
	}
	if !slices.Contains(deps, "github.com/stockflow/stockflow/stock") {
		t.Errorf("cmd/producer does not link stock: is the list the producer's? %v", deps)
	}
}

// docs/architecture.md lists one order's way call by call: every function it names exists in the package it
// names, and the count it gives (calls, files, packages) is the list's.
func TestTheCallByCallPathNamesFunctionsThatExist(t *testing.T) {
	path := section(t, doc(t, "architecture.md"), "### One order, call by call")
	row := regexp.MustCompile("^\\| \\d+ \\| `([^`]+)` \\| `([^`]+)` \\|")
	files, packages := map[string]bool{}, map[string]bool{}
	calls := 0
	for _, line := range strings.Split(path, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		calls++
		file, ok := funcFile(t, "../../"+m[1], m[2])
		if !ok {
			t.Errorf("docs/architecture.md, call by call: %s has no function %s", m[1], m[2])
			continue
		}
		files[file], packages[m[1]] = true, true
	}
	want := fmt.Sprintf("Today: %d calls over %d files and %d\npackages", calls, len(files), len(packages))
	if calls < 30 || !strings.Contains(path, want) {
		t.Errorf("docs/architecture.md, call by call: want the count %q (%d rows)", want, calls)
	}
}

// funcFile returns the file of dir's package (tests aside) that declares name: "F", or "T.M" for a method
// of T or *T.
func funcFile(t *testing.T, dir, name string) (string, bool) {
	recv, fn, isMethod := strings.Cut(name, ".")
	if !isMethod {
		recv, fn = "", name
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := gotoken.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Name.Name != fn || (fd.Recv == nil) != (recv == "") {
				continue
			}
			if recv == "" || receiverName(fd.Recv.List[0].Type) == recv {
				return filepath.Join(dir, e.Name()), true
			}
		}
	}
	return "", false
}

func receiverName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverName(x.X)
	case *ast.IndexExpr:
		return receiverName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}
