package sqlitestore_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgo/idem/sqlitestore"
)

// TestFilesAreTheOwnersOnly: the records hold fingerprints and outcomes
// (a payment's receipt): the database file Open creates, and the -wal and
// -shm files SQLite makes beside it, are readable by their owner only,
// whatever the umask lets through.
func TestFilesAreTheOwnersOnly(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	s, err := sqlitestore.Open(testCtx(t), path, sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Claim(testCtx(t), claimArgs("k", "fp")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v, want no access for group or others", filepath.Base(name), fi.Mode().Perm())
		}
	}
}

// TestExistingFileKeepsItsMode: a file the operator made, with the mode
// the operator chose, is used as it is.
func TestExistingFileKeepsItsMode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	if err := os.WriteFile(path, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil { // past the umask
		t.Fatal(err)
	}
	s, err := sqlitestore.Open(testCtx(t), path, sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("an existing file's mode after Open: %v %v, want 0640", fi.Mode().Perm(), err)
	}
}

// TestPathWithNULRefused: a NUL would end the path where SQLite reads it,
// and open another file than the one named.
func TestPathWithNULRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := sqlitestore.Open(testCtx(t), filepath.Join(dir, "a\x00b.db"), sqlitestore.Config{})
	if err == nil {
		s.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("Open of a path with a NUL: %v, want an error naming the NUL", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
		t.Errorf("Open of %q created %q", "a\x00b.db", "a")
	}
}
