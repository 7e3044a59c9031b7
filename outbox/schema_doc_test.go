package outbox

import (
	"os"
	"strings"
	"testing"
)

// docs/transactions.md prints the DDL of every dialect for those who
// create the tables themselves: it must be what the code runs.
func TestSchemaInTheDocs(t *testing.T) {
	b, err := os.ReadFile("../docs/transactions.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, d := range []*Dialect{SQLite, PostgreSQL, MySQL} {
		for _, stmt := range append(d.schema(), d.processedSchema()) {
			if !strings.Contains(doc, stmt+";") {
				t.Errorf("docs/transactions.md lacks the %s statement\n%s;", d.Name, stmt)
			}
		}
	}
}
