package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// report is what one run showed.
type report struct {
	cfg runConfig

	Messages    int // distinct keys
	Published   int // messages published, duplicates included
	Deliveries  int // deliveries that reached a claim
	Kills       map[string]int
	PlannedKill map[string]int // scripted kills per point that the run planned

	RedisRestarts int
	PGTerminated  int // backends
	BrokerDrops   int // connections cut
	BrokerKills   int // broker nodes crashed and restarted
	StoreErrors   int // side effects or outcome writes whose result was unknown or refused

	EffectsMin, EffectsMax int
	Duplicates             int // effects beyond the first, over every key
	Explained              int // duplicates and fence refusals inside a window a kill or store fault opened
	Refused                int // fenced effects refused
	Lost                   int // keys without an effect
	DeadLetters            int
	ConsumerErrors         int // consumer processes that gave up with an error and were replaced
	Unsettled              int // messages the broker still held once the consumers stopped

	LostOutcomes int    // outcomes a Redis restart lost
	LossWindow   string // what the restarts lost, in words

	Elapsed  time.Duration
	Failures []string
}

func (r *report) fail(format string, a ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, a...))
}

// ok reports whether the run showed what its configuration promises.
func (r *report) ok() bool { return len(r.Failures) == 0 }

// analyze reads the run's events and ledger against what the config
// promises. The lock is held.
//
// A key's window opens when its handler is about to apply the side
// effect (R) and closes when its outcome is stored (C); with memstore,
// whose records die with the process, it stays open for the process's
// life. A process that dies with keys in their window lets each of them
// run once more; so does a side effect or outcome write whose result the consumer
// could not know (U, O: a terminated backend, a restarted Redis), and an
// outcome a Redis restart lost. That is each key's allowance: a duplicate
// effect (unfenced) or a fence refusal (fenced) beyond it is a duplicate
// idem let through with no cause.
func (r *run) analyze(effects map[string]int, unsettled int, elapsed time.Duration) *report {
	keys := r.keys
	rep := &report{cfg: r.cfg, Messages: len(keys), Published: r.published, Unsettled: unsettled, Elapsed: elapsed,
		Kills: map[string]int{}, PlannedKill: map[string]int{},
		RedisRestarts: len(r.restarts), PGTerminated: r.pgTerminated, BrokerDrops: r.brokerDrops, BrokerKills: r.brokerKills}
	for _, p := range r.cfg.points() {
		rep.PlannedKill[p] = r.cfg.KillsPerPoint
	}
	closes := evOutcome
	if r.cfg.Store == storeMem {
		closes = "" // never: every record the process held dies with it
	}
	allow := map[string]int{}
	refused := map[string]int{}
	open := map[int]map[string]bool{}
	known := map[string]bool{}
	for _, k := range keys {
		known[k] = true
	}
	for _, ev := range r.evs {
		if ev.key != "" && !known[ev.key] {
			rep.fail("process %d reported %s for key %q, which was never published", ev.proc, ev.kind, ev.key)
			continue
		}
		switch ev.kind {
		case evDelivery:
			rep.Deliveries++
		case evRun:
			if open[ev.proc] == nil {
				open[ev.proc] = map[string]bool{}
			}
			open[ev.proc][ev.key] = true
		case closes:
			delete(open[ev.proc], ev.key)
		case evRefused:
			rep.Refused++
			refused[ev.key]++
		case evUnknown, evOutcomeErr:
			allow[ev.key]++
			rep.StoreErrors++
		case evKill:
			rep.Kills[ev.detail]++
		case evDead:
			rep.DeadLetters++
		case evExit:
			for k := range open[ev.proc] {
				allow[k]++
			}
			delete(open, ev.proc)
			switch ev.detail {
			case "":
			case "1":
				rep.ConsumerErrors++
			default:
				rep.fail("consumer process %d exited with status %s on its own: %s", ev.proc, ev.detail, ev.note)
			}
		}
	}
	for _, res := range r.restarts {
		for _, l := range res.lost {
			allow[l.key]++
			rep.LostOutcomes++
		}
	}
	rep.LossWindow = r.lossWindow()

	rep.EffectsMin = -1
	var unexplained []string
	for _, k := range keys {
		n := effects[k]
		if rep.EffectsMin < 0 || n < rep.EffectsMin {
			rep.EffectsMin = n
		}
		rep.EffectsMax = max(rep.EffectsMax, n)
		if n == 0 {
			rep.Lost++
		}
		extra := max(n-1, 0) + refused[k]
		rep.Duplicates += max(n-1, 0)
		rep.Explained += min(extra, allow[k])
		if extra > allow[k] {
			unexplained = append(unexplained, fmt.Sprintf("%s (%d effects, %d refused, %d allowed)", k, n, refused[k], allow[k]))
		}
	}

	if rep.Lost > 0 {
		rep.fail("%d messages lost: no effect", rep.Lost)
	}
	if rep.Unsettled > 0 {
		rep.fail("%d messages still unacked after the consumers stopped", rep.Unsettled)
	}
	if rep.DeadLetters > 0 {
		rep.fail("%d messages dead-lettered", rep.DeadLetters)
	}
	if r.cfg.Expect == expectExactlyOnce && rep.EffectsMax > 1 {
		rep.fail("%d duplicate effects where exactly one is promised", rep.Duplicates)
	}
	if len(unexplained) > 0 {
		slices.Sort(unexplained)
		rep.fail("a key ran again with no kill or store fault in its window: %s", strings.Join(unexplained[:min(5, len(unexplained))], ", "))
	}
	if r.cfg.Store == storeRedis && r.cfg.RedisFsync == "always" && rep.LostOutcomes > 0 {
		rep.fail("Redis with appendfsync always lost %d acknowledged outcomes in a restart", rep.LostOutcomes)
	}
	for _, p := range slices.Sorted(maps.Keys(rep.PlannedKill)) {
		if rep.PlannedKill[p] > 0 && rep.Kills[p] == 0 {
			rep.fail("no process was killed at %s: the run does not show what happens there", p)
		}
	}
	return rep
}

// lossWindow describes what the Redis restarts lost.
func (r *run) lossWindow() string {
	var parts []string
	for i, res := range r.restarts {
		p := fmt.Sprintf("restart %d lost %d of the %d outcomes stored before it", i+1, len(res.lost), res.checked)
		if len(res.lost) > 0 {
			oldest := slices.MinFunc(res.lost, func(a, b lostOutcome) int { return a.at.Compare(b.at) })
			newest := slices.MaxFunc(res.lost, func(a, b lostOutcome) int { return a.at.Compare(b.at) })
			p += fmt.Sprintf(", stored %v to %v before the crash", res.crash.Sub(oldest.at).Round(time.Millisecond),
				res.crash.Sub(newest.at).Round(time.Millisecond))
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// killsString lists the kills per point.
func (r *report) killsString() string {
	var parts []string
	for _, p := range append(r.cfg.points(), "random") {
		if n := r.Kills[p]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", p, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (r *report) totalKills() int {
	n := 0
	for _, v := range r.Kills {
		n += v
	}
	return n
}

// line is the report as one line of the progress output.
func (r *report) line() string {
	verdict := "ok"
	if !r.ok() {
		verdict = "FAIL: " + strings.Join(r.Failures, "; ")
	}
	if r.ConsumerErrors > 0 {
		verdict = fmt.Sprintf("%d consumers gave up with an error and were replaced; %s", r.ConsumerErrors, verdict)
	}
	s := fmt.Sprintf("%-34s msgs %d (+%d dup) deliveries %d kills %d [%s] restarts %d pg-terminated %d drops %d broker-crashes %d | effects/key %d..%d dup %d (explained %d) refused %d lost %d | %v | %s",
		r.cfg.Name, r.Messages, r.Published-r.Messages, r.Deliveries, r.totalKills(), r.killsString(), r.RedisRestarts,
		r.PGTerminated, r.BrokerDrops, r.BrokerKills, r.EffectsMin, r.EffectsMax, r.Duplicates, r.Explained, r.Refused, r.Lost,
		r.Elapsed.Round(100*time.Millisecond), verdict)
	if r.LossWindow != "" {
		s += "\n    Redis " + r.LossWindow
	}
	return s
}

// markdownHeader and markdownRow are the table of FAULTS.md.
const markdownHeader = "| run (reproduce in integration/) | messages (+dup) | deliveries | kills | store and broker faults | effects/key | duplicate effects | fence refusals | explained | lost | time | verdict |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|---|\n"

func (r *report) markdownRow() string {
	verdict := "ok"
	if !r.ok() {
		verdict = "FAIL"
	}
	var faults []string
	for _, f := range []struct {
		n    int
		what string
	}{
		{r.RedisRestarts, "Redis restarts"}, {r.PGTerminated, "backends terminated"},
		{r.BrokerDrops, "broker connections cut"}, {r.BrokerKills, "broker nodes crashed"}, {r.StoreErrors, "writes with unknown result"},
	} {
		if f.n > 0 {
			faults = append(faults, fmt.Sprintf("%s %d", f.what, f.n))
		}
	}
	return fmt.Sprintf("| %s<br>`go run ./faults -profile %s -run '^%s$'` | %d (+%d) | %d | %d: %s | %s | %d..%d | %d | %d | %d | %d | %v | %s |\n",
		r.cfg.Name, r.cfg.Profile, r.cfg.Name, r.Messages, r.Published-r.Messages, r.Deliveries, r.totalKills(), r.killsString(),
		cmp.Or(strings.Join(faults, ", "), "none"), r.EffectsMin, r.EffectsMax, r.Duplicates, r.Refused, r.Explained, r.Lost,
		r.Elapsed.Round(time.Second), verdict)
}
