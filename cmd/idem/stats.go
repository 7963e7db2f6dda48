package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemgo/idem/storage"
)

func init() {
	register(command{
		name:    "stats",
		summary: "count a store's records by namespace and status: stalled leases, the oldest in progress, those expiring soon",
		run:     runStatsVerb,
	})
}

// nsStats are the counts of one namespace's records.
type nsStats struct {
	Namespace   string     `json:"namespace"`
	Completed   int64      `json:"completed"`
	Failed      int64      `json:"failed"`
	InProgress  int64      `json:"in_progress"`
	Stalled     int64      `json:"stalled"` // in progress, lease ended: a holder crashed or released, the next delivery takes over
	ResultBytes int64      `json:"result_bytes"`
	ExpireSoon  int64      `json:"expiring_soon"` // within --soon
	OldestKey   string     `json:"oldest_in_progress_key,omitempty"`
	OldestLease *time.Time `json:"oldest_in_progress_lease_until,omitempty"` // the earliest lease end of a record in progress
}

// scanner returns the store's Scanner, or a usage error naming the verb.
func scanner(verb string, s storage.Store) (storage.Scanner, error) {
	sc, ok := s.(storage.Scanner)
	if !ok {
		return nil, usageErrorf("idem: %s: this store cannot list its records", verb)
	}
	return sc, nil
}

func runStatsVerb(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	store := fs.String("store", "", "the store's URL: redis://…, postgres://…, dynamodb://… or sqlite://…")
	namespace := fs.String("namespace", "", "count this namespace only (default: every namespace, each on a line)")
	all := true
	soon := fs.Duration("soon", time.Hour, "count the records that expire within this")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	watch := fs.Duration("watch", 0, "print again every this long, until interrupted (0: once)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: idem stats --store URL [--namespace NS] [--soon 1h] [--json] [--watch 10s]

Reads every live record of the store (page by page: an operator's tool,
not a monitor's: on DynamoDB it scans the whole table) and counts them by
namespace and status. Stalled records are in progress with their lease
ended: their holder crashed, and the next delivery of the key takes it
over. The oldest in progress is the one whose lease ends first.

Flags:
`)
		printFlags(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "namespace" {
			all = false
		}
	})
	switch {
	case *store == "":
		return usageErrorf("idem: stats: --store is required")
	case strings.HasPrefix(*store, "mem:"):
		return usageErrorf("idem: stats: --store mem://: a memstore lives in the process that made it")
	case *soon < 0 || *watch < 0:
		return usageErrorf("idem: stats: --soon and --watch must not be negative")
	}
	s, closeStore, err := openStore(ctx, *store, false)
	if err != nil {
		return err
	}
	defer closeStore()
	sc, err := scanner("stats", s)
	if err != nil {
		return err
	}
	for {
		stats, err := countRecords(ctx, sc, *namespace, all, *soon, time.Now())
		if err != nil {
			return fmt.Errorf("idem: stats: %w", err)
		}
		if *asJSON {
			if err := json.NewEncoder(stdout).Encode(stats); err != nil {
				return err
			}
		} else {
			printStats(stdout, stats)
		}
		if *watch == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*watch):
			if !*asJSON {
				fmt.Fprintln(stdout)
			}
		}
	}
}

// countRecords counts the live records of namespace (of every namespace
// when all), by namespace, in name order.
func countRecords(ctx context.Context, sc storage.Scanner, namespace string, all bool, soon time.Duration, now time.Time) ([]nsStats, error) {
	prefix := ""
	if !all {
		prefix = storage.NamespacePrefix(namespace)
	}
	by := map[string]*nsStats{}
	err := sc.Scan(ctx, prefix, func(r storage.Record) bool {
		ns, _, key, ok := storage.SplitStoreKey(r.Key)
		if !ok {
			return true // not a Guard's key
		}
		st := by[ns]
		if st == nil {
			st = &nsStats{Namespace: ns}
			by[ns] = st
		}
		st.ResultBytes += int64(len(r.Result))
		if r.ExpiresAt.Before(now.Add(soon)) {
			st.ExpireSoon++
		}
		switch r.Status {
		case storage.StatusCompleted:
			st.Completed++
		case storage.StatusFailed:
			st.Failed++
		case storage.StatusInProgress:
			st.InProgress++
			if !r.LeaseUntil.After(now) {
				st.Stalled++
			}
			if st.OldestLease == nil || r.LeaseUntil.Before(*st.OldestLease) {
				until := r.LeaseUntil.UTC()
				st.OldestLease, st.OldestKey = &until, key
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	out := make([]nsStats, 0, len(by))
	for _, st := range by {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b nsStats) int { return strings.Compare(a.Namespace, b.Namespace) })
	if len(out) == 0 && !all {
		out = append(out, nsStats{Namespace: namespace})
	}
	return out, nil
}

func printStats(w io.Writer, stats []nsStats) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "namespace\tcompleted\tfailed\tin progress\tstalled\texpiring soon\tresult bytes\t")
	for _, st := range stats {
		fmt.Fprintf(tw, "%q\t%d\t%d\t%d\t%d\t%d\t%d\t\n", st.Namespace, st.Completed, st.Failed, st.InProgress, st.Stalled, st.ExpireSoon, st.ResultBytes)
	}
	tw.Flush()
	for _, st := range stats {
		if st.OldestLease != nil {
			fmt.Fprintf(w, "oldest in progress in %q: key %q, lease until %s\n", st.Namespace, st.OldestKey, st.OldestLease.Format(time.RFC3339))
		}
	}
}

// ageFilter is purge's --older-than and --retention.
type ageFilter struct {
	olderThan time.Duration // 0: every record
	retention time.Duration
}

// check returns a usage error for flags that cannot select a record.
func (a ageFilter) check() error {
	switch {
	case a.olderThan < 0:
		return usageErrorf("idem: purge: --older-than %v: must be positive", a.olderThan)
	case a.retention <= 0:
		return usageErrorf("idem: purge: --retention %v: must be positive", a.retention)
	case a.olderThan != 0 && a.olderThan >= a.retention:
		return usageErrorf("idem: purge: --older-than %v is not less than --retention %v: a record written that long ago has expired already, "+
			"so none would match (if the Guard keeps its records longer, give its retention with --retention)", a.olderThan, a.retention)
	}
	return nil
}

// lastWritten returns when r was last written, as far as the record
// tells (see idem purge -h): the end of the lease of a record in
// progress, else its expiry minus the retention it was written with.
func lastWritten(r storage.Record, retention time.Duration) time.Time {
	if r.Status == storage.StatusInProgress && !r.LeaseUntil.IsZero() {
		return r.LeaseUntil
	}
	return r.ExpiresAt.Add(-retention)
}

// confirmBulk asks whether to delete the n records which names, live of
// them under live leases.
func confirmBulk(stdout io.Writer, n int, which string, live int) error {
	fmt.Fprintf(stdout, "%d %s.", n, which)
	switch {
	case live == 1:
		fmt.Fprint(stdout, "\n\n1 of them is being run right now, under a live lease: a purge lets a duplicate run beside it.\n\n")
	case live > 1:
		fmt.Fprintf(stdout, "\n\n%d of them are being run right now, under live leases: a purge lets a duplicate run beside each.\n\n", live)
	default:
		fmt.Fprint(stdout, " ")
	}
	fmt.Fprint(stdout, "Delete them? [y/N] ")
	if !confirmed() {
		return errors.New("idem: purge: not deleted")
	}
	return nil
}

// deleteAsRead deletes each of found only as the scan read it: one taken
// over or finished since is kept, and named; one gone since is counted.
func deleteAsRead(ctx context.Context, s storage.Store, found []storage.Record) (deleted int, kept []keptRecord, gone int, err error) {
	for _, r := range found {
		switch err := s.DeleteIf(ctx, r.Key, r.Status, r.Token); {
		case err == nil:
			deleted++
		case errors.Is(err, storage.ErrChanged):
			_, scope, key, _ := storage.SplitStoreKey(r.Key)
			kept = append(kept, keptRecord{Key: key, Scope: scope})
		case errors.Is(err, storage.ErrNotFound):
			gone++
		default:
			return deleted, kept, gone, fmt.Errorf("idem: purge: after %d of %d: %w", deleted+len(kept)+gone, len(found), err)
		}
	}
	return deleted, kept, gone, nil
}

// purgeStatus deletes the records of namespace with status, last written
// before now minus age.olderThan if that is set, after counting them and
// asking unless yes.
func purgeStatus(ctx context.Context, s storage.Store, namespace, status string, age ageFilter, yes, asJSON bool, stdout io.Writer) error {
	want, ok := map[string]storage.Status{"completed": storage.StatusCompleted, "failed": storage.StatusFailed, "in-progress": storage.StatusInProgress}[status]
	if !ok {
		return usageErrorf("idem: purge: --status %q: want completed, failed or in-progress", status)
	}
	sc, err := scanner("purge", s)
	if err != nil {
		return err
	}
	var before time.Time
	which := fmt.Sprintf("%s records in namespace %q", status, namespace)
	if age.olderThan > 0 {
		before = time.Now().Add(-age.olderThan)
		which += fmt.Sprintf(" last written more than %v ago (before %s, taking a retention of %v)", age.olderThan, before.UTC().Format(time.RFC3339), age.retention)
	}
	var found []storage.Record
	live := 0
	now := time.Now()
	if err := sc.Scan(ctx, storage.NamespacePrefix(namespace), func(r storage.Record) bool {
		if r.Status == want && (before.IsZero() || lastWritten(r, age.retention).Before(before)) {
			found = append(found, storage.Record{Key: r.Key, Status: r.Status, Token: r.Token})
			if r.Status == storage.StatusInProgress && r.LeaseUntil.After(now) {
				live++
			}
		}
		return true
	}); err != nil {
		return fmt.Errorf("idem: purge: %w", err)
	}
	if !yes {
		if err := confirmBulk(stdout, len(found), which, live); err != nil {
			return err
		}
	}
	deleted, kept, gone, err := deleteAsRead(ctx, s, found)
	if err != nil {
		return err
	}
	if asJSON {
		out := struct {
			Namespace string       `json:"namespace"`
			Status    string       `json:"status"`
			OlderThan string       `json:"older_than,omitempty"`
			Before    *time.Time   `json:"before,omitempty"` // last written before this
			Retention string       `json:"retention,omitempty"`
			Deleted   int          `json:"deleted"`
			Kept      []keptRecord `json:"kept,omitempty"` // changed since the scan
			Gone      int          `json:"gone,omitempty"` // expired or deleted since the scan
		}{Namespace: namespace, Status: status, Deleted: deleted, Kept: kept, Gone: gone}
		if !before.IsZero() {
			b := before.UTC()
			out.OlderThan, out.Before, out.Retention = age.olderThan.String(), &b, age.retention.String()
		}
		return json.NewEncoder(stdout).Encode(out)
	}
	for _, k := range kept {
		fmt.Fprintf(stdout, "idem purge: kept %s: it changed since it was counted (taken over or finished)\n", k)
	}
	fmt.Fprintf(stdout, "idem purge: deleted %d %s", deleted, which)
	if gone > 0 {
		fmt.Fprintf(stdout, "; %d were gone already", gone)
	}
	fmt.Fprintln(stdout)
	return nil
}

// keptRecord is a record purge --status did not delete, because it
// changed since the scan.
type keptRecord struct {
	Key   string `json:"key"`
	Scope string `json:"scope,omitempty"`
}

func (k keptRecord) String() string {
	if k.Scope == "" {
		return strconv.Quote(k.Key)
	}
	return fmt.Sprintf("%q (scope %q)", k.Key, k.Scope)
}
