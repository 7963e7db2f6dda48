package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The deps check: the go.mod of a module users import requires only the
// modules its packages import, so that a user of idemnats downloads no
// PostgreSQL client and a user of idemkafka no fake Kafka broker. A test
// that needs another store or broker lives in the integration module.
//
// A module's packages are those a user can import (no "internal" element
// in their path) and every package they import, directly or not, on any
// of the platforms below; its tests are not among them. go mod tidy keeps
// a requirement for any package of the module or any of its tests, so a
// requirement that only a test (or an internal package no other package
// imports) needs fails the check.

// notLibraries lists the published modules that users do not import
// packages of, so whose go.mod the check leaves alone: the command
// (installed with go install) and the examples. A module with no package
// but commands is left alone too.
var notLibraries = map[string]bool{corePath + "/cmd/idem": true, corePath + "/examples": true}

// testOnlyAllowed lists the requirements a module may carry for its tests
// alone: the module the requirement is allowed in ("" for every module),
// then the requirement and why. The modules an allowed requirement's
// packages import are allowed with it.
var testOnlyAllowed = map[string]map[string]string{
	"": {
		// goleak checks that a module's tests leave no goroutine running
		// (TestMain in every module). It imports the standard library
		// only, so it adds no package to a user's build and, its go.mod
		// being at go 1.20, none of its own requirements (testify) to a
		// user's module graph: one small module listed, never compiled.
		"go.uber.org/goleak": "the tests' goroutine-leak check",
	},
	corePath + "/idemotel": {
		// idemotel writes to the OpenTelemetry API; its tests read what
		// it wrote through the SDK's in-memory reader and span recorder.
		// A program that exports idemotel's metrics or spans has the SDK
		// in its build already (the API alone records nothing), at the
		// version of the API it uses, which idemotel requires anyway.
		"go.opentelemetry.io/otel/sdk":        "the tests' span recorder; every exporting program has the SDK",
		"go.opentelemetry.io/otel/sdk/metric": "the tests' metric reader; every exporting program has the SDK",
	},
	corePath + "/idemotel/otelrelay": {
		// As idemotel's: the tests read the relay's metrics through the
		// SDK's in-memory reader.
		"go.opentelemetry.io/otel/sdk/metric": "the tests' metric reader; every exporting program has the SDK",
	},
}

// unlinked lists, for each command users install, the modules none of
// whose packages it may link: the operator's binary links no broker client
// (the broker demos are in the examples module, beside their clients). A
// module path stands for the modules under it too (franz-go/pkg/kmsg).
var unlinked = map[string][]string{
	corePath + "/cmd/idem": {"github.com/twmb/franz-go", "github.com/rabbitmq/amqp091-go", "github.com/nats-io/nats.go"},
}

// platforms are the GOOS/GOARCH pairs whose imports count: go mod tidy
// keeps what any platform's files import, and some modules import a
// package on one system only (modernc.org/sqlite imports go-isatty on
// macOS and Windows, not on Linux).
var platforms = [][2]string{
	{"linux", "amd64"}, {"linux", "arm64"}, {"linux", "386"},
	{"darwin", "amd64"}, {"darwin", "arm64"}, {"windows", "amd64"},
}

// listed is a package as go list -json describes it.
type listed struct {
	ImportPath string
	Name       string
	ForTest    string // the package whose test this variant is for
	Module     *struct{ Path string }
	Deps       []string
}

// graph is what go list -deps -test says of the packages of some modules,
// their tests, and everything they import: the module of each package,
// and each package's imports, direct or not. A package p is there as
// itself (its imports without its tests'), as "p [p.test]" and
// "p_test [p.test]" (its test variants) and as "p.test" (the test binary,
// importing all its tests do).
type graph struct {
	module map[string]string          // package → module
	name   map[string]string          // package → its name
	deps   map[string]map[string]bool // package → its imports, transitively
}

func newGraph() graph {
	return graph{module: map[string]string{}, name: map[string]string{}, deps: map[string]map[string]bool{}}
}

// add adds what go list -deps -json printed.
func (g graph) add(out []byte) error {
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return err
		}
		path := plain(p.ImportPath)
		// The module of each package, not of a test's own package
		// ("p_test") or binary ("p.test").
		test := path == p.ForTest+"_test" || p.ForTest == "" && strings.HasSuffix(path, ".test")
		if p.Module != nil && !test {
			g.module[path] = p.Module.Path
			g.name[path] = p.Name
		}
		if g.deps[p.ImportPath] == nil {
			g.deps[p.ImportPath] = map[string]bool{}
		}
		for _, d := range p.Deps {
			g.deps[p.ImportPath][plain(d)] = true
		}
	}
	return nil
}

// modulesOf returns the modules of pkgs and of the packages they import.
func (g graph) modulesOf(pkgs ...string) map[string]bool {
	mods := map[string]bool{}
	for _, p := range pkgs {
		if m, ok := g.module[plain(p)]; ok {
			mods[m] = true
		}
		for q := range g.deps[p] {
			if m, ok := g.module[q]; ok {
				mods[m] = true
			}
		}
	}
	return mods
}

// plain strips the test variant of a package path: "p [p.test]" is p.
func plain(path string) string {
	p, _, _ := strings.Cut(path, " ")
	return p
}

// public reports whether a user can import the package at path: no
// element of it is "internal".
func public(path string) bool {
	return !slices.Contains(strings.Split(path, "/"), "internal")
}

// listDeps returns what go list -deps -test says of the packages of mods,
// in the workspace at root, on every platform.
func listDeps(root string, mods []module) (graph, error) {
	var patterns []string
	for _, m := range mods {
		dir, err := filepath.Rel(root, m.Dir)
		if err != nil {
			return graph{}, err
		}
		patterns = append(patterns, "./"+filepath.ToSlash(dir)+"/...")
	}
	g := newGraph()
	for i, pl := range platforms {
		args := []string{"list", "-deps", "-test", "-json=ImportPath,Name,ForTest,Module,Deps"}
		if i > 0 {
			// A package with no file for this platform is an error that
			// only means it is not built there.
			args = append(args, "-e")
		}
		out, err := goCmd(root, []string{"GOOS=" + pl[0], "GOARCH=" + pl[1], "CGO_ENABLED=0"}, append(args, patterns...)...)
		if err != nil {
			return graph{}, err
		}
		if err := g.add(out); err != nil {
			return graph{}, err
		}
	}
	return g, nil
}

// requireProblems is the deps check of mods (see the top of this file)
// over their graph g; allowed is testOnlyAllowed or a test's. It returns a
// list of problems, empty when every module passes.
func requireProblems(g graph, mods []module, allowed map[string]map[string]string) ([]string, error) {
	var problems []string
	for _, m := range mods {
		gm, err := readGoMod(m)
		if err != nil {
			return nil, err
		}
		var own []string // the module's packages, as go list names them
		for p, mod := range g.module {
			if mod == m.Path {
				own = append(own, p)
			}
		}
		slices.Sort(own)
		if !slices.ContainsFunc(own, func(p string) bool { return public(p) && g.name[p] != "main" }) {
			continue // commands only: a tool users install, not a library
		}
		used := g.modulesOf(slices.DeleteFunc(slices.Clone(own), func(p string) bool { return !public(p) })...)
		// The allowed requirements and the modules their packages import.
		allow := map[string]bool{}
		for _, scope := range []string{"", m.Path} {
			for req := range allowed[scope] {
				allow[req] = true
				var theirs []string
				for p, mod := range g.module {
					if mod == req {
						theirs = append(theirs, p)
					}
				}
				maps.Copy(allow, g.modulesOf(theirs...))
			}
		}
		var extra, by []string // the requirements, and the packages whose tests import them
		for _, r := range gm.Require {
			if used[r.Path] || allow[r.Path] {
				continue
			}
			extra = append(extra, r.Path)
			for _, p := range own {
				if g.modulesOf(p + ".test")[r.Path] && !slices.Contains(by, p) {
					by = append(by, p)
				}
			}
		}
		if len(extra) > 0 {
			why := "no package of it imports"
			if len(by) > 0 {
				slices.Sort(by)
				why = "only the tests of " + strings.Join(by, ", ") + " import"
			}
			problems = append(problems, fmt.Sprintf("%s/go.mod requires what %s: %s", rel(m.Dir), why, strings.Join(extra, ", ")))
		}
	}
	return problems, nil
}

// contractOnly lists the key-value stores: they meet idem through the
// store contract alone, so no package of the core module but storage is
// among their imports, direct or not. A store is written against the
// contract, not the Guard, and a change of the Guard's package rebuilds
// none of them. pgstore and sqlitestore are not listed: their
// transactional guards take an idem.Config and return an idem.Result.
var contractOnly = []string{corePath + "/memstore", corePath + "/redisstore", corePath + "/dynamostore"}

// contractProblems returns a problem for each package of pkgs that g does
// not hold, or whose imports (its tests' aside), direct or not, hold a
// package of the module core other than core/storage and those under the
// package's own path.
func contractProblems(g graph, core string, pkgs []string) []string {
	var problems []string
	for _, p := range pkgs {
		deps, ok := g.deps[p]
		if !ok {
			problems = append(problems, p+" is not in the workspace")
			continue
		}
		var other []string
		for q := range deps {
			if g.module[q] == core && q != core+"/storage" && !strings.HasPrefix(q, p+"/") {
				other = append(other, q)
			}
		}
		if len(other) > 0 {
			slices.Sort(other)
			problems = append(problems, p+" imports "+strings.Join(other, ", "))
		}
	}
	return problems
}

// linkCheck returns a problem for each command of forbidden (see unlinked)
// that links, on any of the platforms, a package of a module it lists.
func linkCheck(root string, forbidden map[string][]string) ([]string, error) {
	var problems []string
	for _, cmd := range slices.Sorted(maps.Keys(forbidden)) {
		linked := map[string]bool{} // the forbidden packages the command links
		for _, pl := range platforms {
			out, err := goCmd(root, []string{"GOOS=" + pl[0], "GOARCH=" + pl[1], "CGO_ENABLED=0"},
				"list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}", cmd)
			if err != nil {
				return nil, err
			}
			for line := range strings.Lines(string(out)) {
				pkg, mod, _ := strings.Cut(strings.TrimSpace(line), " ")
				for _, f := range forbidden[cmd] {
					if mod == f || strings.HasPrefix(mod, f+"/") {
						linked[pkg] = true
					}
				}
			}
		}
		if len(linked) > 0 {
			problems = append(problems, fmt.Sprintf("%s links %s", cmd, strings.Join(slices.Sorted(maps.Keys(linked)), ", ")))
		}
	}
	return problems, nil
}

// deps runs the deps check on the libraries of the workspace (every
// published module but those of notLibraries), checks that the key-value
// stores import only storage of the core (contractOnly), and that no
// command links what unlinked forbids it.
func deps(mods []module) error {
	work, err := goCmd("", nil, "env", "GOWORK")
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(work)) == "" || strings.TrimSpace(string(work)) == "off" {
		return errors.New("deps: run it in the workspace (go.work)")
	}
	var libs []module
	for _, m := range mods {
		if !private[m.Path] && !notLibraries[m.Path] {
			libs = append(libs, m)
		}
	}
	g, err := listDeps(filepath.Dir(strings.TrimSpace(string(work))), libs)
	if err != nil {
		return err
	}
	if problems := contractProblems(g, corePath, contractOnly); len(problems) > 0 {
		return fmt.Errorf("a key-value store imports a package of the core module other than storage:\n  %s\n"+
			"Move what it needs into the store contract (storage), or out of the store.",
			strings.Join(problems, "\n  "))
	}
	problems, err := requireProblems(g, libs, testOnlyAllowed)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("a module requires what only its tests need, which every user would download:\n  %s\n"+
			"Move those tests to the integration module and run go run ./internal/release tidy DIR, or allow the requirement in testOnlyAllowed (internal/release/deps.go), saying why.",
			strings.Join(problems, "\n  "))
	}
	root := filepath.Dir(strings.TrimSpace(string(work)))
	if problems, err = linkCheck(root, unlinked); err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("a command links what it must not (unlinked, internal/release/deps.go):\n  %s", strings.Join(problems, "\n  "))
	}
	fmt.Fprintln(os.Stdout, "deps check: every library's go.mod requires only what its packages import, and the test modules testOnlyAllowed lists; the key-value stores import only storage of the core; no command links a module unlinked forbids it")
	return nil
}
