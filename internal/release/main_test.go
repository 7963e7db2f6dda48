package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeModule writes a go.mod into a new folder and returns the module.
func writeModule(t *testing.T, path, gomod string) module {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+path+"\n\ngo 1.26.0\n"+gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	return module{Path: path, Dir: dir}
}

func TestModuleVersion(t *testing.T) {
	core := writeModule(t, corePath, "")
	store := writeModule(t, corePath+"/redisstore", "require github.com/idemgo/idem v0.3.1\n")
	grpc := writeModule(t, corePath+"/idemgrpc", "require github.com/idemgo/idem v0.3.1\n")
	if v, err := moduleVersion([]module{core, store, grpc}); err != nil || v != "v0.3.1" {
		t.Fatalf("aligned modules: %q, %v; want v0.3.1", v, err)
	}

	replaced := writeModule(t, corePath+"/pgstore", "require github.com/idemgo/idem v0.3.1\n\nreplace github.com/idemgo/idem => ../\n")
	_, err := moduleVersion([]module{core, store, replaced})
	if err == nil || !strings.Contains(err.Error(), "replace github.com/idemgo/idem => ../") {
		t.Fatalf("a module with a replace directive: %v, want an error naming it", err)
	}

	behind := writeModule(t, corePath+"/pgstore", "require github.com/idemgo/idem v0.3.0\n")
	_, err = moduleVersion([]module{core, store, behind})
	if err == nil || !strings.Contains(err.Error(), "at v0.3.0: github.com/idemgo/idem/pgstore requires github.com/idemgo/idem") {
		t.Fatalf("modules at two versions: %v, want an error naming both", err)
	}

	unreleased := writeModule(t, corePath+"/pgstore", "require github.com/idemgo/idem v0.0.0-00010101000000-000000000000\n")
	if _, err := moduleVersion([]module{core, unreleased}); err == nil {
		t.Fatal("a pseudo-version was taken as a release version")
	}
}

func TestTagName(t *testing.T) {
	for path, want := range map[string]string{
		corePath:                    "v1.2.3",
		corePath + "/redisstore":    "redisstore/v1.2.3",
		corePath + "/idemkafka/pgx": "idemkafka/pgx/v1.2.3",
	} {
		if got := tagName(module{Path: path}, "v1.2.3"); got != want {
			t.Errorf("tagName(%s) = %s, want %s", path, got, want)
		}
	}
}
