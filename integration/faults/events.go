package main

import (
	"bufio"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// A consumer process tells the harness what it does, one line per step on
// its standard output: the event's letter, then its fields. Each line is
// written with one write(2) of less than PIPE_BUF bytes before the step it
// announces (or right after the step it reports), so a process that kills
// itself has told the harness everything up to its kill.
const (
	evDelivery   = "D" // a delivery reached its claim: D key
	evRun        = "R" // the handler is about to apply the side effect: R key
	evEffect     = "E" // the side effect is applied (in tx mode: written in the transaction): E key
	evRefused    = "F" // the fenced side effect was refused: applied under another token before: F key
	evUnknown    = "U" // the side effect's statement failed: applied or not: U key
	evOutcome    = "C" // the outcome is stored: C key
	evOutcomeErr = "O" // the outcome write failed: stored or not: O key
	evAcked      = "A" // the message was acked: A key
	evDead       = "X" // the message was dead-lettered: X key reason (key - when the adapter does not say)
	evKill       = "K" // the process kills itself now: K point key (- when the point has no one key)
	evReady      = "S" // the consumer is subscribed and handling: S
)

// emitter writes events to the harness.
type emitter struct {
	mu sync.Mutex
	w  io.Writer
}

var events = &emitter{w: os.Stdout}

func (e *emitter) emit(fields ...string) {
	for i, f := range fields {
		if f == "" {
			fields[i] = "-" // a field with nothing to say keeps its place
		}
	}
	line := strings.Join(fields, " ") + "\n"
	e.mu.Lock()
	defer e.mu.Unlock()
	io.WriteString(e.w, line)
}

// event is one line a consumer process wrote, as the harness read it.
type event struct {
	proc   int // the harness's number of the process
	at     time.Time
	kind   string
	key    string
	detail string // K: the point; X: the reason; C: the token; exit: the status, if it exited
	note   string // exit: the end of the process's log
}

// readEvents reads the events of process proc from r until EOF and sends
// each to out.
func readEvents(proc int, r io.Reader, out func(event)) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		ev := event{proc: proc, at: time.Now(), kind: f[0]}
		switch {
		case ev.kind == evKill && len(f) >= 3:
			ev.detail, ev.key = f[1], f[2]
		case len(f) >= 2:
			ev.key = f[1]
			if len(f) >= 3 {
				ev.detail = f[2]
			}
		}
		if ev.key == "-" {
			ev.key = ""
		}
		out(ev)
	}
}
