package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// The stores a run's consumers share.
const (
	storePG    = "pg"       // pgstore, records in PostgreSQL; the side effect in the ledger on its own
	storePGTx  = "pgtx"     // pgstore's TxGuard: the side effect and the outcome commit in one transaction
	storeRedis = "redis"    // redisstore on a redis-server of the harness's own
	storeMem   = "memstore" // memstore: one consumer process at a time, records in its memory
)

// How the side effect is made.
const (
	modeUnfenced = "unfenced" // one more ledger row, whatever else happened
	modeFenced   = "fenced"   // the ledger row only under the token that applied the key's effect
	modeTx       = "tx"       // in the TxGuard's transaction, with the outcome
)

// The points at which a consumer process kills itself with SIGKILL.
const (
	killBeforeClaim  = "before-claim"  // a delivery arrived; its key is not claimed yet
	killAfterClaim   = "after-claim"   // its key is claimed, in a batch ahead of the workers; the handler has not run
	killBeforeEffect = "before-effect" // the key is claimed, the handler runs; no side effect yet
	killAfterEffect  = "after-effect"  // the side effect is applied (tx: written, not committed); no outcome
	killAfterCommit  = "after-commit"  // tx: the transaction with effect and outcome committed; the outer record not completed (Kafka: the offset not committed to Kafka)
	killAfterOutcome = "after-outcome" // the outcome is stored; the message is not acked
)

// Broken builds of the consumer: each breaks one rule the suite checks.
const (
	brokenAckFirst  = "ack-first"         // acks the message before the handler runs, so before the outcome is stored
	brokenNoFence   = "no-fence"          // fenced mode without the token check: the effect applied whatever the fence says
	brokenOutsideTx = "effect-outside-tx" // tx mode with the side effect written outside the transaction
)

// What a run must show.
const (
	expectExactlyOnce = "exactly-once" // one effect per message, none lost
	expectBounded     = "bounded"      // none lost; a duplicate effect only where a kill or store fault hit the window
)

// runConfig is one configuration of the suite.
type runConfig struct {
	Name       string
	Profile    string // the profile it belongs to
	Broker     string // "nats", "amqp", "kafka"
	Store      string
	RedisFsync string // storeRedis: "always", "everysec", or "" for appendonly no
	Mode       string
	Expect     string
	Broken     string // "" for the real consumer

	Consumers  int     // consumer processes running at once
	Messages   int     // distinct keys
	Duplicates float64 // share of keys published a second time, later

	KillsPerPoint int // scripted self-kills at each point of the mode
	RandomKills   int // SIGKILLs from the harness at random moments
	RedisRestarts int // crashes and restarts of the harness's redis-server
	PGTerminates  int // rounds of pg_terminate_backend on the consumers' connections
	BrokerDrops   int // rounds of cutting every broker connection
	BrokerKills   int // crashes (SIGKILL) and restarts of a broker node: Kafka's, the node leading a partition

	PublishOver time.Duration // publishing is spread over this long; faults land in it too

	Lease   time.Duration // the Guard's lease
	Timeout time.Duration // the run fails when it has not settled by then
}

// points returns the kill points of the config's mode.
func (c runConfig) points() []string {
	if c.Mode == modeTx && c.Broker == "kafka" {
		// kafkapg commits the outcome with the effect and the partition's
		// offset: after the commit the record is done, in PostgreSQL.
		return []string{killBeforeClaim, killBeforeEffect, killAfterEffect, killAfterCommit}
	}
	claim := []string{killBeforeClaim}
	if c.Broker == "amqp" {
		// idemamqp claims the deliveries waiting in its prefetch buffer
		// before its workers take them: the keys of a batch stay claimed
		// while their deliveries wait.
		claim = append(claim, killAfterClaim)
	}
	if c.Mode == modeTx {
		return append(claim, killBeforeEffect, killAfterEffect, killAfterCommit, killAfterOutcome)
	}
	return append(claim, killBeforeEffect, killAfterEffect, killAfterOutcome)
}

// consumerSpec is what a consumer process is told, as JSON in the
// IDEMFAULTS_SPEC variable.
type consumerSpec struct {
	Broker    string
	BrokerURL string // through the harness's proxy
	Target    string // the stream (NATS), queue (AMQP) or topic (Kafka)
	Durable   string // the NATS durable consumer, the Kafka group

	Store      string
	RedisAddr  string
	PGURL      string
	AppName    string // application_name of every PostgreSQL connection
	Records    string // schema.table of pgstore's records
	Offsets    string // Kafka with pgtx: schema.table of kafkapg's offsets
	Ledger     string // the ledger's schema
	RedisKeys  string // redisstore's key prefix
	Namespace  string
	Lease      time.Duration
	BusyDelay  time.Duration
	RetryDelay time.Duration

	Mode   string
	Broken string

	KillPoint string // "" for none
	KillAt    int    // kill on the KillAt-th time the point is reached (from 1)
}

const specEnv = "IDEMFAULTS_SPEC"

func (s consumerSpec) env() string {
	b, _ := json.Marshal(s)
	return specEnv + "=" + string(b)
}

func specFromEnv() (consumerSpec, error) {
	var s consumerSpec
	v := os.Getenv(specEnv)
	if v == "" {
		return s, fmt.Errorf("%s is not set: this command is started by the harness", specEnv)
	}
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, fmt.Errorf("%s: %w", specEnv, err)
	}
	return s, nil
}
