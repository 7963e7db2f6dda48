package idem_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestREADMEQuickStartIsTheExample keeps the README's Quick start identical
// to the body of Example, which the test run compiles and checks against its
// output: the code a new user copies first is code that runs.
func TestREADMEQuickStartIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Quick start\n")
	if !ok {
		t.Fatal("README.md has no \"## Quick start\" section")
	}
	_, block, ok := strings.Cut(section, "```go\n")
	block, _, closed := strings.Cut(block, "```")
	if !ok || !closed {
		t.Fatal("the Quick start has no ```go block")
	}

	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Example" {
			body = string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
		}
	}
	if body == "" {
		t.Fatal("example_test.go has no func Example")
	}
	// The body less its one tab of indentation and its Output comment.
	body, _, _ = strings.Cut(body, "\t// Output:")
	var lines []string
	for _, line := range strings.Split(strings.Trim(body, "\n"), "\n") {
		lines = append(lines, strings.TrimPrefix(line, "\t"))
	}
	if want, got := strings.Join(lines, "\n")+"\n", block; got != want {
		t.Errorf("README.md's Quick start differs from the body of Example in example_test.go.\nREADME:\n%s\nExample:\n%s", got, want)
	}
}

// TestREADMEInstallListsEveryModule keeps the README's install list and
// the repository's modules together: every module go.work uses is in the
// list (go get for a library, go install for a command) but those that are
// no one's dependency (examples, integration, the Kafka benchmarks), and
// every module the list names exists.
func TestREADMEInstallListsEveryModule(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Status and install\n")
	if !ok {
		t.Fatal("README.md has no \"## Status and install\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	listed := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "go" || (f[1] != "get" && f[1] != "install") {
			continue
		}
		path := strings.TrimPrefix(strings.TrimPrefix(f[2], "github.com/idemgo/idem"), "/")
		listed[path] = true
	}
	work, err := os.ReadFile("go.work")
	if err != nil {
		t.Fatal(err)
	}
	_, use, _ := strings.Cut(string(work), "use (")
	use, _, _ = strings.Cut(use, ")")
	notDependencies := map[string]bool{"examples": true, "integration": true, "idemkafka/kafkabench": true}
	modules := map[string]bool{}
	for _, line := range strings.Split(use, "\n") {
		dir := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(line), "./"), ".")
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		modules[dir] = true
		if !notDependencies[dir] && !listed[dir] {
			t.Errorf("README.md's install list lacks the module %q (github.com/idemgo/idem/%s)", dir, dir)
		}
	}
	for path := range listed {
		if !modules[path] {
			t.Errorf("README.md's install list names %q, which is not a module of go.work", "github.com/idemgo/idem/"+path)
		}
	}
}
