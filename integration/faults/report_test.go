package main

import (
	"strings"
	"testing"
	"time"
)

// TestAnalyzeAllowance checks the verdict's arithmetic on made-up runs: a
// duplicate effect passes only where a process died with the key in its
// window or a write's result was unknown, once per such event.
func TestAnalyzeAllowance(t *testing.T) {
	ev := func(proc int, kind, key string) event { return event{proc: proc, kind: kind, key: key} }
	cases := []struct {
		name    string
		expect  string
		store   string
		evs     []event
		effects map[string]int
		want    string // "" for a pass, else part of a failure
	}{
		{"one effect each", expectExactlyOnce, storePG,
			[]event{ev(1, evRun, "a"), ev(1, evOutcome, "a"), ev(1, evRun, "b"), ev(1, evOutcome, "b")},
			map[string]int{"a": 1, "b": 1}, ""},
		{"a lost message", expectBounded, storePG,
			[]event{ev(1, evRun, "a"), ev(1, evOutcome, "a")},
			map[string]int{"a": 1}, "1 messages lost"},
		{"a duplicate after a kill in the window", expectBounded, storePG,
			[]event{ev(1, evRun, "a"), ev(1, evEffect, "a"), ev(1, evExit, ""), ev(2, evRun, "a"), ev(2, evOutcome, "a"), ev(2, evRun, "b"), ev(2, evOutcome, "b")},
			map[string]int{"a": 2, "b": 1}, ""},
		{"a duplicate with the kill after the outcome", expectBounded, storePG,
			[]event{ev(1, evRun, "a"), ev(1, evOutcome, "a"), ev(1, evExit, ""), ev(2, evRun, "a"), ev(2, evOutcome, "a"), ev(2, evRun, "b"), ev(2, evOutcome, "b")},
			map[string]int{"a": 2, "b": 1}, "ran again with no kill or store fault in its window: a "},
		{"two duplicates for one kill", expectBounded, storePG,
			[]event{ev(1, evRun, "a"), ev(1, evExit, ""), ev(2, evRun, "a"), ev(2, evOutcome, "a"), ev(2, evRun, "b"), ev(2, evOutcome, "b")},
			map[string]int{"a": 3, "b": 1}, "a (3 effects, 0 refused, 1 allowed)"},
		{"a duplicate after an unknown outcome write", expectBounded, storeRedis,
			[]event{ev(1, evRun, "a"), ev(1, evOutcomeErr, "a"), ev(1, evRun, "a"), ev(1, evOutcome, "a"), ev(1, evRun, "b"), ev(1, evOutcome, "b")},
			map[string]int{"a": 2, "b": 1}, ""},
		{"a duplicate where exactly once is promised", expectExactlyOnce, storePG,
			[]event{ev(1, evRun, "a"), ev(1, evExit, ""), ev(2, evRun, "a"), ev(2, evOutcome, "a"), ev(2, evRun, "b"), ev(2, evOutcome, "b")},
			map[string]int{"a": 2, "b": 1}, "duplicate effects where exactly one is promised"},
		{"a fence refusal with no cause", expectExactlyOnce, storeRedis,
			[]event{ev(1, evRun, "a"), ev(1, evOutcome, "a"), ev(2, evRun, "a"), ev(2, evRefused, "a"), ev(2, evOutcome, "a"), ev(2, evRun, "b"), ev(2, evOutcome, "b")},
			map[string]int{"a": 1, "b": 1}, "a (1 effects, 1 refused, 0 allowed)"},
		{"memstore forgets at exit what the process completed", expectExactlyOnce, storeMem,
			[]event{ev(1, evRun, "a"), ev(1, evOutcome, "a"), ev(1, evAcked, "a"), ev(1, evExit, ""), ev(2, evRun, "a"), ev(2, evRefused, "a"), ev(2, evOutcome, "a"), ev(2, evRun, "b"), ev(2, evOutcome, "b")},
			map[string]int{"a": 1, "b": 1}, ""},
		{"a consumer that crashed on its own", expectBounded, storePG,
			[]event{ev(1, evRun, "a"), ev(1, evOutcome, "a"), {proc: 1, kind: evExit, detail: "2", note: "panic: boom"}, ev(2, evRun, "b"), ev(2, evOutcome, "b")},
			map[string]int{"a": 1, "b": 1}, "consumer process 1 exited with status 2 on its own: panic: boom"},
		{"a dead letter", expectBounded, storePG,
			[]event{ev(1, evRun, "a"), ev(1, evOutcome, "a"), ev(1, evDead, "b")},
			map[string]int{"a": 1, "b": 1}, "1 messages dead-lettered"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &run{cfg: runConfig{Name: tc.name, Store: tc.store, Mode: modeUnfenced, Expect: tc.expect}, keys: []string{"a", "b"}, evs: tc.evs}
			got := strings.Join(r.analyze(tc.effects, 0, time.Second).Failures, "; ")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("failures %q, want %q", got, tc.want)
			}
		})
	}
}
