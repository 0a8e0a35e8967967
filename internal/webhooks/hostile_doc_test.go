package webhooks_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/security.md's table of hostile inputs from hostileCases")

// securityDoc is the page that shows hostileCases as a table.
const securityDoc = "../../docs/security.md"

// hostileTableHeader starts the table in securityDoc; the table ends at the
// first line that is not a row.
const hostileTableHeader = "| # | Kind | Hostile or mistaken input | Shipped defaults | Hardened flags |\n|---|---|---|---|---|\n"

// hostileTable renders hostileCases as securityDoc shows them: an outcome
// under the shipped defaults and one under the hardened flags (testPolicy).
func hostileTable() string {
	var b strings.Builder
	b.WriteString(hostileTableHeader)
	for i, tc := range hostileCases() {
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", i+1, tc.kind, tc.input, outcomeCell(tc.want.shipped), outcomeCell(tc.want.hardened))
	}
	return b.String()
}

func outcomeCell(o outcome) string {
	if o.refused == "" {
		return "**accepted**; " + o.atLaunch
	}
	return "refused, naming `" + o.refused + "`"
}

// TestSecurityDocShowsEveryHostileInput keeps docs/security.md's table in
// step with hostileCases, which TestHostileInputs sends to the API server:
// a row added, changed or dropped in one and not the other fails here.
// go test ./internal/webhooks -run TestSecurityDocShowsEveryHostileInput -update
// rewrites the table.
func TestSecurityDocShowsEveryHostileInput(t *testing.T) {
	doc, err := os.ReadFile(securityDoc)
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(doc, []byte(hostileTableHeader))
	if start < 0 {
		t.Fatalf("%s has no table starting with %q", securityDoc, hostileTableHeader)
	}
	end := start
	for end < len(doc) && doc[end] == '|' {
		next := bytes.IndexByte(doc[end:], '\n')
		if next < 0 {
			end = len(doc)
			break
		}
		end += next + 1
	}
	want := hostileTable()
	if *updateDocs {
		updated := append(append(append([]byte{}, doc[:start]...), want...), doc[end:]...)
		if err := os.WriteFile(securityDoc, updated, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := string(doc[start:end]); got != want {
		t.Fatalf("%s's table of hostile inputs is not hostileCases; rewrite it with -update.\ngot:\n%s\nwant:\n%s", securityDoc, got, want)
	}
}
