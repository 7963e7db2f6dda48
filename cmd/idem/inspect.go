package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/internal/cli"
	"github.com/idemgo/idem/storage"
)

func init() {
	register(command{
		name:    "inspect",
		summary: "show the record of one idempotency key: status, attempts, lease, expiry, fingerprint, outcome",
		run:     runInspect,
	})
	register(command{
		name:    "purge",
		summary: "delete the record of one idempotency key, so that its next delivery runs again",
		run:     runPurge,
	})
}

// stdin is what purge reads its confirmation from; tests replace it.
var stdin io.Reader = os.Stdin

// confirmed reads a line from stdin and reports whether it says yes.
func confirmed() bool {
	answer, _ := bufio.NewReader(stdin).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(answer))
	return a == "y" || a == "yes"
}

// keyFlags are the flags that name one record.
type keyFlags struct {
	store, namespace, scope *string
	json                    *bool
}

func newKeyFlags(fs *flag.FlagSet) keyFlags {
	return keyFlags{
		store:     fs.String("store", "", "the store's URL: redis://…, postgres://…, dynamodb://… or sqlite://… (memstore lives in its process: nothing to inspect from outside)"),
		namespace: fs.String("namespace", "", "the Guard's Config.Namespace the key was used under"),
		scope:     fs.String("scope", "", "the key's scope (the tenant an adapter's WithScope named), if any"),
		json:      fs.Bool("json", false, "print JSON instead of text"),
	}
}

// parseKeyArgs parses args, flags before or after the one key, and returns
// the key.
func parseKeyArgs(fs *flag.FlagSet, args []string) (string, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", err
		}
		return "", &cli.UsageError{Err: err, Printed: true}
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return "", usageErrorf("idem: %s: no key: idem %s [flags] KEY", fs.Name(), fs.Name())
	}
	key := rest[0]
	if err := fs.Parse(rest[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", err
		}
		return "", &cli.UsageError{Err: err, Printed: true}
	}
	if fs.NArg() > 0 {
		return "", usageErrorf("idem: %s: one key only; unexpected %q", fs.Name(), strings.Join(fs.Args(), " "))
	}
	return key, nil
}

// openRecord opens the store of f and returns it with the Guard-side
// store key of key, and the function that closes the store.
func openRecord(ctx context.Context, name string, f keyFlags, key string) (storage.Store, string, func() error, error) {
	switch {
	case *f.store == "":
		return nil, "", nil, usageErrorf("idem: %s: --store is required", name)
	case strings.HasPrefix(*f.store, "mem:"):
		return nil, "", nil, usageErrorf("idem: %s: --store mem://: a memstore lives in the process that made it; there is nothing to %s from outside", name, name)
	}
	cfg := idem.Config{Namespace: *f.namespace}
	if err := cfg.CheckKey(*f.scope, key); err != nil {
		return nil, "", nil, usageErrorf("idem: %s: %v", name, err)
	}
	s, closeStore, err := openStore(ctx, *f.store, false)
	if err != nil {
		return nil, "", nil, err
	}
	return s, storage.ScopedStoreKey(*f.namespace, *f.scope, key), closeStore, nil
}

// recordView is what inspect prints of a record.
type recordView struct {
	Key         string     `json:"key"`
	Namespace   string     `json:"namespace"`
	Scope       string     `json:"scope"`
	Status      string     `json:"status"`
	Attempt     int        `json:"attempt"`
	Lease       string     `json:"lease"` // "live", "ended", "" when not in progress
	LeaseUntil  *time.Time `json:"lease_until,omitempty"`
	ExpiresAt   time.Time  `json:"expires_at"`
	Fingerprint string     `json:"fingerprint"` // hex
	ResultBytes int        `json:"result_bytes"`
	HTTPStatus  int        `json:"http_status,omitempty"` // a response idemhttp stored
	Failure     string     `json:"failure,omitempty"`     // a Failed record's cause
}

func view(r storage.Record, key, namespace, scope string, now time.Time) recordView {
	v := recordView{
		Key: key, Namespace: namespace, Scope: scope,
		Status: r.Status.String(), Attempt: r.Attempt, ExpiresAt: r.ExpiresAt.UTC(),
		Fingerprint: hex.EncodeToString(r.Fingerprint), ResultBytes: len(r.Result),
	}
	switch r.Status {
	case storage.StatusInProgress:
		v.Lease = "ended"
		if !r.LeaseUntil.IsZero() {
			until := r.LeaseUntil.UTC()
			v.LeaseUntil = &until
			if until.After(now) {
				v.Lease = "live"
			}
		}
	case storage.StatusCompleted:
		if resp, err := idemhttp.DecodeResponse(r.Result); err == nil {
			v.HTTPStatus = resp.Status
		}
	case storage.StatusFailed:
		v.Failure = storage.DecodeFailure(r.Result).Error()
	}
	return v
}

// notDeleted is purge's error for a DeleteIf of the record it showed
// that deleted nothing: the record changed or went since.
func notDeleted(key string, err error) error {
	switch {
	case errors.Is(err, storage.ErrChanged):
		return fmt.Errorf("idem: purge: not deleted: the record of %q changed since it was shown (taken over or finished): inspect it again", key)
	case errors.Is(err, storage.ErrNotFound):
		return fmt.Errorf("idem: purge: not deleted: the record of %q is gone since it was shown (expired, or purged by someone else)", key)
	}
	return fmt.Errorf("idem: purge: %w", err)
}

func (v recordView) print(w io.Writer) {
	fmt.Fprintf(w, "key          %q\n", v.Key)
	if v.Namespace != "" || v.Scope != "" {
		fmt.Fprintf(w, "namespace    %q\nscope        %q\n", v.Namespace, v.Scope)
	}
	fmt.Fprintf(w, "status       %s\nattempt      %d\n", v.Status, v.Attempt)
	if v.Lease != "" {
		if v.LeaseUntil != nil {
			fmt.Fprintf(w, "lease        %s until %s\n", v.Lease, v.LeaseUntil.Format(time.RFC3339Nano))
		} else {
			fmt.Fprintf(w, "lease        released: the next claim takes the key\n")
		}
	}
	fmt.Fprintf(w, "expires      %s\nfingerprint  %s\nresult       %d bytes\n", v.ExpiresAt.Format(time.RFC3339Nano), v.Fingerprint, v.ResultBytes)
	if v.HTTPStatus != 0 {
		fmt.Fprintf(w, "http status  %d\n", v.HTTPStatus)
	}
	if v.Failure != "" {
		fmt.Fprintf(w, "failure      %q\n", v.Failure) // its text may be a publisher's: no escape or line of it reaches the terminal
	}
}

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := newKeyFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: idem inspect --store URL [--namespace NS] [--scope S] [--json] KEY

Shows the record of KEY: its status (InProgress, Completed, Failed), its
attempts, whether its lease is live, when it expires, its fingerprint, the
size of its outcome and, for a response idemhttp stored, its HTTP status;
for a failure, its cause. The key is the caller's, as the Guard saw it,
under the Guard's namespace and the adapter's scope. Exit status 1 when the
key has no record.

Flags:
`)
		printFlags(fs)
	}
	key, err := parseKeyArgs(fs, args)
	if err != nil {
		return err
	}
	s, storeKey, closeStore, err := openRecord(ctx, "inspect", f, key)
	if err != nil {
		return err
	}
	defer closeStore()
	r, err := s.Get(ctx, storeKey)
	if errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("idem: inspect: no record of key %q (namespace %q, scope %q): never claimed, expired, or purged", key, *f.namespace, *f.scope)
	}
	if err != nil {
		return fmt.Errorf("idem: inspect: %w", err)
	}
	v := view(r, key, *f.namespace, *f.scope, time.Now())
	if *f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	v.print(stdout)
	return nil
}

// purgeUsage is purge's help, before its flags.
const purgeUsage = `Usage: idem purge --store URL [--namespace NS] [--scope S] [--yes] KEY
       idem purge --store URL --namespace NS --status failed [--older-than 24h [--retention 168h]] [--yes]

Deletes the record of KEY, whatever its status, after showing it and
asking (or at once with --yes): its next delivery or request runs the
operation again. Purge a key stuck in a state you have dealt with by
hand; a key in progress with a live lease is being run right now, and a
purge lets a duplicate run beside it. With --status, deletes every record
of the namespace in that status (failed: let every failed key run again),
after counting them and asking.

A record is deleted only as it was shown or counted: one that a worker
took over or finished in the meantime is kept, and purge says so.

With --older-than D, --status deletes only the records last written more
than D ago. A record does not keep when it was written, but it keeps when
it expires, which the store set to the time of the write plus the
retention the Guard asked for: so a failed record failed at its expiry
minus --retention (the Guard's Config.FailedRetention), and a completed
one completed at its expiry minus --retention (Config.Retention). A record
in progress counts from the end of its lease (a released one, from the
end of the lease it gave up: its expiry minus --retention, the Guard's
Config.FailedRetention), so a live lease is never older than anything.
--retention defaults to idem's default retention, 24h; name the Guard's
if it sets another, or records are taken for older (a shorter retention)
or younger (a longer one) than they are. Ages are measured on this
machine's clock against times the store's clock set.

Flags:
`

func runPurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("purge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := newKeyFlags(fs)
	yes := fs.Bool("yes", false, "delete without asking")
	status := fs.String("status", "", "instead of one KEY, every record of --namespace with this status: completed, failed or in-progress")
	var age ageFilter
	fs.DurationVar(&age.olderThan, "older-than", 0, "with --status: only the records last written more than this long ago (see above)")
	fs.DurationVar(&age.retention, "retention", idem.DefaultRetention, "with --older-than: the retention the Guard wrote the records with: its Config.FailedRetention for failed and in-progress records, its Config.Retention for completed ones")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), purgeUsage)
		printFlags(fs)
	}
	if slices.ContainsFunc(args, func(a string) bool {
		return a == "--status" || a == "-status" || strings.HasPrefix(a, "--status=") || strings.HasPrefix(a, "-status=")
	}) {
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		return runPurgeStatus(ctx, f, *status, age, *yes, stdout)
	}
	key, err := parseKeyArgs(fs, args)
	if err != nil {
		return err
	}
	if age.olderThan != 0 {
		return usageErrorf("idem: purge: --older-than goes with --status, not with a KEY")
	}
	return purgeKey(ctx, f, key, *yes, stdout)
}

// runPurgeStatus is purge --status: it deletes the records of a namespace
// in a status, counted and confirmed first.
func runPurgeStatus(ctx context.Context, f keyFlags, status string, age ageFilter, yes bool, stdout io.Writer) error {
	switch {
	case *f.store == "":
		return usageErrorf("idem: purge: --store is required")
	case strings.HasPrefix(*f.store, "mem:"):
		return usageErrorf("idem: purge: --store mem://: a memstore lives in the process that made it")
	}
	if err := age.check(); err != nil {
		return err
	}
	s, closeStore, err := openStore(ctx, *f.store, false)
	if err != nil {
		return err
	}
	defer closeStore()
	return purgeStatus(ctx, s, *f.namespace, status, age, yes, *f.json, stdout)
}

// purgeKey deletes the record of key as it showed it, after asking unless
// yes.
func purgeKey(ctx context.Context, f keyFlags, key string, yes bool, stdout io.Writer) error {
	s, storeKey, closeStore, err := openRecord(ctx, "purge", f, key)
	if err != nil {
		return err
	}
	defer closeStore()
	r, err := s.Get(ctx, storeKey)
	if errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("idem: purge: no record of key %q (namespace %q, scope %q): nothing to delete", key, *f.namespace, *f.scope)
	}
	if err != nil {
		return fmt.Errorf("idem: purge: %w", err)
	}
	v := view(r, key, *f.namespace, *f.scope, time.Now())
	if !yes {
		v.print(stdout)
		if v.Lease == "live" {
			fmt.Fprintln(stdout, "\nThe key is being run right now, under a live lease: a purge lets a duplicate run beside it.")
		}
		fmt.Fprint(stdout, "\nDelete this record? [y/N] ")
		if !confirmed() {
			return errors.New("idem: purge: not deleted")
		}
	}
	if err := s.DeleteIf(ctx, storeKey, r.Status, r.Token); err != nil {
		return notDeleted(key, err)
	}
	if *f.json {
		return json.NewEncoder(stdout).Encode(struct {
			Purged recordView `json:"purged"`
		}{v})
	}
	fmt.Fprintf(stdout, "idem purge: deleted the record of %q (%s)\n", key, v.Status)
	return nil
}
