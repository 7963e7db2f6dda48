package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// workspace writes a Go workspace into a new folder: files maps a path in
// it to the file's text, and every folder with a go.mod is a module of
// go.work. It returns the folder and the modules, by path.
func workspace(t *testing.T, files map[string]string) (string, map[string]module) {
	t.Helper()
	root := t.TempDir()
	mods := map[string]module{}
	work := "go 1.26.0\n\nuse (\n"
	for name, text := range files {
		file := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if filepath.Base(name) == "go.mod" {
			path, _, _ := strings.Cut(strings.TrimPrefix(text, "module "), "\n")
			mods[path] = module{Path: path, Dir: filepath.Dir(file)}
			work += "\t./" + filepath.Dir(name) + "\n"
		}
	}
	if err := os.WriteFile(filepath.Join(root, "go.work"), []byte(work+")\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// go list finds the workspace from its folder; nothing is downloaded.
	t.Setenv("GOWORK", filepath.Join(root, "go.work"))
	t.Setenv("GOFLAGS", "")
	t.Setenv("GOPROXY", "off")
	return root, mods
}

// pkg returns the text of a Go file of package name that imports imports.
func pkg(name string, imports ...string) string {
	s := "package " + name + "\n\nimport (\n"
	for _, i := range imports {
		s += "\t_ \"" + i + "\"\n"
	}
	return s + ")\n"
}

func TestDepsCheck(t *testing.T) {
	root, mods := workspace(t, map[string]string{
		// A library: its package imports dep, and winonly on Windows; its
		// tests import testdep and the leak checker; an internal package
		// no other package imports imports testdep too.
		"lib/go.mod": "module example.com/lib\n\ngo 1.26.0\n\nrequire (\n" +
			"\texample.com/dep v0.1.0\n\texample.com/winonly v0.1.0\n\texample.com/testdep v0.1.0\n" +
			"\tgo.uber.org/goleak v1.3.0\n\texample.com/leakdep v0.1.0 // indirect\n)\n",
		"lib/lib.go":            pkg("lib", "example.com/dep"),
		"lib/lib_windows.go":    pkg("lib", "example.com/winonly"),
		"lib/lib_test.go":       pkg("lib", "example.com/testdep"),
		"lib/leak_test.go":      pkg("lib_test", "go.uber.org/goleak"),
		"lib/internal/h/h.go":   pkg("h", "example.com/testdep"),
		"dep/go.mod":            "module example.com/dep\n\ngo 1.26.0\n",
		"dep/dep.go":            pkg("dep"),
		"winonly/go.mod":        "module example.com/winonly\n\ngo 1.26.0\n",
		"winonly/winonly.go":    pkg("winonly"),
		"testdep/go.mod":        "module example.com/testdep\n\ngo 1.26.0\n",
		"testdep/testdep.go":    pkg("testdep"),
		"goleak/go.mod":         "module go.uber.org/goleak\n\ngo 1.26.0\n\nrequire example.com/leakdep v0.1.0\n",
		"goleak/goleak.go":      pkg("goleak", "example.com/leakdep"),
		"leakdep/go.mod":        "module example.com/leakdep\n\ngo 1.26.0\n",
		"leakdep/leakdep.go":    pkg("leakdep"),
		"clean/go.mod":          "module example.com/clean\n\ngo 1.26.0\n\nrequire example.com/dep v0.1.0\n",
		"clean/clean.go":        pkg("clean", "example.com/dep"),
		"clean/clean_test.go":   pkg("clean", "example.com/dep"),
		"clean/cmd/c/main.go":   pkg("main", "example.com/dep"),
		"clean/internal/x/x.go": pkg("x", "example.com/dep"),
		// A tool: commands only, installed rather than imported.
		"tool/go.mod":       "module example.com/tool\n\ngo 1.26.0\n\nrequire example.com/testdep v0.1.0\n",
		"tool/main.go":      pkg("main"),
		"tool/main_test.go": pkg("main", "example.com/testdep"),
	})
	check := func(allowed map[string]map[string]string, paths ...string) []string {
		t.Helper()
		var ms []module
		for _, p := range paths {
			ms = append(ms, mods[p])
		}
		g, err := listDeps(root, ms)
		if err != nil {
			t.Fatal(err)
		}
		problems, err := requireProblems(g, ms, allowed)
		if err != nil {
			t.Fatal(err)
		}
		return problems
	}
	leak := map[string]map[string]string{"": {"go.uber.org/goleak": "leak check"}}

	if p := check(leak, "example.com/clean"); len(p) > 0 {
		t.Errorf("a module requiring only what its package imports: %q, want no problem", p)
	}

	if p := check(nil, "example.com/tool"); len(p) > 0 {
		t.Errorf("a module of commands only: %q, want it left alone", p)
	}

	p := check(leak, "example.com/lib", "example.com/clean")
	if len(p) != 1 || !strings.Contains(p[0], "lib/go.mod requires what only the tests of example.com/lib import: example.com/testdep") {
		t.Fatalf("a module requiring a module for its tests only: %q, want one problem naming example.com/testdep", p)
	}
	for _, ok := range []string{"example.com/dep", "example.com/winonly", "goleak", "leakdep"} {
		if strings.Contains(p[0], ok) {
			t.Errorf("%s was called test-only: %s", ok, p[0])
		}
	}

	// Not allowed, the leak checker and what it brings are test-only too.
	p = check(nil, "example.com/lib")
	if len(p) != 1 || !strings.Contains(p[0], "go.uber.org/goleak") || !strings.Contains(p[0], "example.com/leakdep") {
		t.Errorf("with no allowance: %q, want goleak and leakdep named", p)
	}
	// Allowed for another module only, it is not allowed here.
	p = check(map[string]map[string]string{"example.com/clean": leak[""]}, "example.com/lib")
	if len(p) != 1 || !strings.Contains(p[0], "go.uber.org/goleak") {
		t.Errorf("allowed in another module: %q, want goleak named", p)
	}

	// The test-only requirement dropped, the module passes.
	if _, err := goCmd(mods["example.com/lib"].Dir, nil, "mod", "edit", "-droprequire=example.com/testdep"); err != nil {
		t.Fatal(err)
	}
	if p := check(leak, "example.com/lib"); len(p) > 0 {
		t.Errorf("after dropping the test-only requirement: %q, want no problem", p)
	}
}

// A key-value store may import storage and its own packages of the core
// module, and nothing else of it, directly or not.
func TestContractProblems(t *testing.T) {
	const core = "example.com/core"
	root, mods := workspace(t, map[string]string{
		"core/go.mod":                  "module example.com/core\n\ngo 1.26.0\n",
		"core/core.go":                 pkg("core", core+"/storage"),
		"core/storage/storage.go":      pkg("storage"),
		"core/internal/x/x.go":         pkg("x"),
		"core/memstore/memstore.go":    pkg("memstore", core+"/storage", core+"/memstore/shard"),
		"core/memstore/shard/shard.go": pkg("shard"),
		"core/memstore/mem_test.go":    pkg("memstore", core),
		"kv/go.mod":                    "module example.com/core/kv\n\ngo 1.26.0\n\nrequire example.com/core v0.1.0\n",
		"kv/kv.go":                     pkg("kv", core+"/storage", core+"/kv/wire"),
		"kv/wire/wire.go":              pkg("wire", core+"/internal/x"),
		"guarded/go.mod":               "module example.com/core/guarded\n\ngo 1.26.0\n\nrequire example.com/core v0.1.0\n",
		"guarded/guarded.go":           pkg("guarded", core),
	})
	g, err := listDeps(root, []module{mods[core], mods[core+"/kv"], mods[core+"/guarded"]})
	if err != nil {
		t.Fatal(err)
	}
	if p := contractProblems(g, core, []string{core + "/memstore"}); len(p) > 0 {
		t.Errorf("a store importing storage and its own package, its test the core: %q, want no problem", p)
	}
	p := contractProblems(g, core, []string{core + "/kv", core + "/guarded", core + "/gone"})
	want := []string{
		core + "/kv imports " + core + "/internal/x",
		core + "/guarded imports " + core,
		core + "/gone is not in the workspace",
	}
	if !slices.Equal(p, want) {
		t.Errorf("problems %q, want %q", p, want)
	}
}

func TestLinkCheck(t *testing.T) {
	root, _ := workspace(t, map[string]string{
		// A tool whose demo links a broker's client through a library of
		// another module; its other command links nothing of it.
		"tool/go.mod":          "module example.com/tool\n\ngo 1.26.0\n\nrequire example.com/adapter v0.1.0\n",
		"tool/cmd/op/main.go":  pkg("main", "example.com/adapter"),
		"tool/cmd/ok/main.go":  pkg("main"),
		"adapter/go.mod":       "module example.com/adapter\n\ngo 1.26.0\n\nrequire example.com/broker v0.1.0\n",
		"adapter/adapter.go":   pkg("adapter", "example.com/broker/pkg/wire"),
		"broker/go.mod":        "module example.com/broker\n\ngo 1.26.0\n",
		"broker/pkg/wire/w.go": pkg("wire"),
	})
	forbidden := func(cmd string) map[string][]string { return map[string][]string{cmd: {"example.com/broker"}} }
	p, err := linkCheck(root, forbidden("example.com/tool/cmd/op"))
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 1 || !strings.Contains(p[0], "example.com/tool/cmd/op links example.com/broker/pkg/wire") {
		t.Errorf("a command linking a forbidden module through another: %q, want one problem naming the package", p)
	}
	if p, err := linkCheck(root, forbidden("example.com/tool/cmd/ok")); err != nil || len(p) > 0 {
		t.Errorf("a command linking none: %q, %v, want no problem", p, err)
	}
}
