package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKafkaDiagnose checks that a run that did not settle is told apart
// when kfake told two members they lead one generation, from the kgo log
// lines the consumers write, and only then.
func TestKafkaDiagnose(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	joined := func(member string, gen string, leader bool) string {
		if !leader {
			return "[INFO] joined; group: g, member_id: " + member + ", instance_id: <nil>, generation: " + gen + ", leader: false"
		}
		return "[INFO] joined, balancing group; group: g, member_id: " + member + ", instance_id: <nil>, generation: " + gen + ", balance_protocol: cooperative-sticky, leader: true"
	}
	one := write("1.log", joined("a", "3", true), joined("a", "4", false))
	two := write("2.log", joined("b", "3", false), joined("b", "4", true))
	three := write("3.log", joined("c", "4", true))
	b := &kafkaBroker{}
	if got := b.diagnose([]string{one, two}); got != "" {
		t.Errorf("one leader per generation: diagnosed %q, want nothing", got)
	}
	got := b.diagnose([]string{one, two, three, filepath.Join(dir, "missing.log")})
	if !strings.Contains(got, "generation 4 (2 members)") || strings.Contains(got, "generation 3") {
		t.Errorf("two leaders of generation 4: diagnosed %q", got)
	}
}
