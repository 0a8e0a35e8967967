// Package docs_test checks docs/troubleshooting.md against the reasons the
// manager's code can write into a condition or an event, so that a reason
// added to the code without a row on the page, or a row left behind by a
// reason that is gone, fails the unit tests.
package docs_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository's root, seen from this package's directory.
const repoRoot = "../.."

// troubleshootingDoc is the page every reason must have a row in.
const troubleshootingDoc = repoRoot + "/docs/troubleshooting.md"

// sourceDirs hold the manager's code: every condition and event reason it
// sets is declared or written as a literal in one of them.
var sourceDirs = []string{"api", "exp", "internal"}

// reasonSource is where a reason was found, for the failure message.
type reasonSource struct {
	reason string
	where  string
}

// codeReasons parses the non-test Go files under sourceDirs and returns
// every reason they can set, by name of the reason, with where it was seen:
//   - untyped string constants named ...Reason, ...Event or Event...
//     (infrav1.LaunchFailedReason, ReplacingFailedMachineEvent,
//     nodeipam.EventBadRecord);
//   - string literals given as the reason of a recorder's Event or Eventf
//     call (its third argument);
//   - string literals given as the Reason field of a composite literal
//     (a metav1.Condition written inline).
//
// Parsing rather than a hand list is the point: a reason added to the code
// is found without anyone remembering this test.
func codeReasons(t *testing.T) map[string]string {
	t.Helper()
	found := map[string]string{}
	for _, dir := range sourceDirs {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			name := d.Name()
			if d.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "zz_generated") {
				return nil
			}
			return fileReasons(path, found)
		})
		if err != nil {
			t.Fatalf("failed to parse the Go files under %s: %v", dir, err)
		}
	}
	return found
}

// fileReasons adds the reasons one Go file sets to found (see codeReasons).
func fileReasons(path string, found map[string]string) error {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	add := func(expr ast.Expr) {
		lit, ok := expr.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil || s == "" {
			return
		}
		if _, ok := found[s]; !ok {
			p := fset.Position(lit.Pos())
			rel, _ := filepath.Rel(repoRoot, p.Filename)
			found[s] = rel + ":" + strconv.Itoa(p.Line)
		}
	}
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GenDecl:
			if n.Tok == token.CONST {
				for _, value := range reasonConstants(n) {
					add(value)
				}
			}
		case *ast.CallExpr:
			// recorder.Event(object, type, reason, ...) and Eventf.
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Event" || sel.Sel.Name == "Eventf") && len(n.Args) >= 3 {
				add(n.Args[2])
			}
		case *ast.KeyValueExpr:
			if key, ok := n.Key.(*ast.Ident); ok && key.Name == "Reason" {
				add(n.Value)
			}
		}
		return true
	})
	return nil
}

// reasonConstants returns the values of a const declaration's untyped
// constants whose names say they are reasons. A typed constant
// (container.EventStart is an EventType) is not a reason.
func reasonConstants(decl *ast.GenDecl) []ast.Expr {
	var values []ast.Expr
	for _, spec := range decl.Specs {
		vs, ok := spec.(*ast.ValueSpec)
		if !ok || vs.Type != nil {
			continue
		}
		for i, id := range vs.Names {
			if isReasonName(id.Name) && i < len(vs.Values) {
				values = append(values, vs.Values[i])
			}
		}
	}
	return values
}

// isReasonName tells the names of reason constants.
func isReasonName(name string) bool {
	return strings.HasSuffix(name, "Reason") || strings.HasSuffix(name, "Event") ||
		(strings.HasPrefix(name, "Event") && len(name) > len("Event"))
}

// docReasons returns the reasons that head a row of a table on the page:
// the first cell of the row, as `Reason`.
func docReasons(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(troubleshootingDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	rows := map[string]bool{}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		first := strings.TrimSpace(cells[1])
		if len(first) > 2 && strings.HasPrefix(first, "`") && strings.HasSuffix(first, "`") {
			rows[strings.Trim(first, "`")] = true
		}
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestTroubleshootingCoversEveryReason fails when a condition or event
// reason the code can set has no row in docs/troubleshooting.md (a row is
// a table line whose first cell is the reason in backticks), and when a
// row names a reason the code no longer sets.
func TestTroubleshootingCoversEveryReason(t *testing.T) {
	code := codeReasons(t)
	doc := docReasons(t)
	if len(code) < 40 {
		t.Fatalf("found only %d reasons in %v: the parsing missed the declarations", len(code), sourceDirs)
	}

	var missing []reasonSource
	for reason, where := range code {
		if !doc[reason] {
			missing = append(missing, reasonSource{reason, where})
		}
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i].reason < missing[j].reason })
	for _, m := range missing {
		t.Errorf("%s has no row for reason %s (set at %s)", troubleshootingDoc, m.reason, m.where)
	}

	var stale []string
	for reason := range doc {
		if _, ok := code[reason]; !ok {
			stale = append(stale, reason)
		}
	}
	slices.Sort(stale)
	for _, reason := range stale {
		t.Errorf("%s has a row for reason %s, which no code under %v sets", troubleshootingDoc, reason, sourceDirs)
	}
}
