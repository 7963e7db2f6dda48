package chassis

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgo/idem/consumer"
)

// Header is one header of a message, as the chassis sees every broker's.
type Header struct {
	Name  string
	Value []byte
}

// Letter is a dead letter being made: the original message's parts, then
// the idem headers.
type Letter struct {
	RecordKey []byte   // a Kafka record's key; nil elsewhere
	Body      []byte   // the original's body
	Headers   []Header // the original's headers, in order
	Added     []Header // the headers that say why and whence

	stripped bool // Strip left out what it could

	// MaxHeaders, when positive, bounds the headers alone (the original's
	// and the idem ones, counted as Fit counts them), for a broker that
	// sends a message's headers apart from its body and refuses them past
	// a limit of their own (AMQP's content header, which must fit one frame
	// of the connection's frame_max): Fit keeps them within it, less the
	// same slack, as it keeps the whole within its limit.
	MaxHeaders int
}

// headerOverhead is what a header costs a message beyond its name and
// value, counted generously for every broker (Kafka's varints, NATS'
// "Name: Value\r\n", an AMQP table entry's type and lengths).
const headerOverhead = 16

// frameSlack is kept free of the broker's limit for the message's own
// framing: Kafka's record and batch headers, NATS' subject and reply, AMQP's
// properties.
const frameSlack = 4096

// maxKeptHeader is the longest original header value a dead letter keeps
// once it has to be cut.
const maxKeptHeader = 1024

// NewLetter returns the dead letter of a message whose parts are recordKey,
// body and headers (the slices are not copied: the Letter's methods do not
// change them), with the idem headers of the verdict v and of the key, if
// the message had a usable one (keyOK), and extra, the consumer's own
// (where the message came from).
func NewLetter(recordKey, body []byte, headers []Header, v Verdict, key string, keyOK bool, extra ...Header) *Letter {
	l := &Letter{RecordKey: recordKey, Body: body, Headers: headers}
	l.add(consumer.HeaderReason, string(v.Reason))
	if v.Cause != nil {
		l.add(consumer.HeaderCause, v.Cause.Error())
	}
	if keyOK {
		if len(key) <= consumer.MaxCopiedKey {
			l.add(consumer.HeaderKey, key)
		} else {
			l.add(consumer.HeaderKeySize, strconv.Itoa(len(key)))
			l.add(consumer.HeaderKeySHA256, sum(key))
		}
	}
	for _, h := range extra {
		l.add(h.Name, string(h.Value))
	}
	return l
}

// add adds an idem header, its value made fit for a header: on one line,
// valid UTF-8, at most consumer.MaxHeaderValue bytes.
func (l *Letter) add(name, value string) {
	l.Added = append(l.Added, Header{Name: name, Value: []byte(oneLine(value))})
}

// size returns the letter's size as Fit counts it.
func (l *Letter) size() int { return len(l.RecordKey) + len(l.Body) + l.headerSize() }

// headerSize returns the size of the letter's headers as Fit counts them.
func (l *Letter) headerSize() int {
	n := 0
	for _, hs := range [][]Header{l.Headers, l.Added} {
		for _, h := range hs {
			n += len(h.Name) + len(h.Value) + headerOverhead
		}
	}
	return n
}

// Fit cuts the letter until it is at most limit bytes, and its headers at
// most MaxHeaders bytes when that is set, both counted with a slack for
// the broker's framing, and reports whether it cut anything. In this order
// it leaves out: the original headers longer than 1 KiB, the longest
// first; the body and the record key (for the whole's limit only: they are
// no headers); every other original header. Each part left out is
// recorded in an idem header: the body's and the record key's size and
// SHA-256, the names of the headers. The idem headers themselves are
// bounded, so a letter always fits limits of some 16 KiB or more.
func (l *Letter) Fit(limit int) bool {
	limit -= frameSlack
	maxHeaders := l.MaxHeaders - frameSlack
	var cut []string
	// reserve is what the list of the headers left out will take.
	reserve := func() int { return len(strings.Join(cut, ",")) + 64 }
	wholeFits := func(reserve int) bool { return l.size()+reserve <= limit }
	headersFit := func(reserve int) bool { return l.MaxHeaders <= 0 || l.headerSize()+reserve <= maxHeaders }
	if wholeFits(0) && headersFit(0) {
		return false
	}
	long := slices.Clone(l.Headers)
	slices.SortStableFunc(long, func(a, b Header) int { return cmp.Compare(len(b.Value), len(a.Value)) })
	for _, h := range long {
		if (wholeFits(reserve()) && headersFit(reserve())) || len(h.Value) <= maxKeptHeader {
			break
		}
		l.Headers = slices.DeleteFunc(slices.Clone(l.Headers), func(x Header) bool { return x.Name == h.Name && len(x.Value) == len(h.Value) })
		cut = append(cut, h.Name)
	}
	if !wholeFits(reserve()) && len(l.Body)+len(l.RecordKey) > 0 {
		if len(l.Body) > 0 {
			l.add(consumer.HeaderBodySize, strconv.Itoa(len(l.Body)))
			l.add(consumer.HeaderBodySHA256, sum(string(l.Body)))
		}
		if len(l.RecordKey) > 0 {
			l.add(consumer.HeaderRecordKeySize, strconv.Itoa(len(l.RecordKey)))
			l.add(consumer.HeaderRecordKeySHA256, sum(string(l.RecordKey)))
		}
		l.Body, l.RecordKey = nil, nil
	}
	if !wholeFits(reserve()) || !headersFit(reserve()) {
		for _, h := range l.Headers {
			cut = append(cut, h.Name)
		}
		l.Headers = nil
	}
	if len(cut) > 0 {
		names := make([]string, len(cut))
		for i, n := range cut {
			names[i] = truncate(n, 64)
		}
		l.add(consumer.HeaderCutHeaders, strings.Join(names, ","))
	}
	return true
}

// Strip leaves out the body, the record key and every original header,
// recorded as Fit records them: the smallest dead letter, for a broker
// that refused the fitted one as too large.
func (l *Letter) Strip() {
	l.Fit(0)
	l.stripped = true
}

// sum is the lowercase hex SHA-256 of s.
func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// oneLine returns s fit for a header value: its control characters (line
// breaks among them) turned into spaces, invalid UTF-8 replaced, cut at a
// rune boundary to consumer.MaxHeaderValue bytes.
func oneLine(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return truncate(s, consumer.MaxHeaderValue)
}

// truncate cuts s at a rune boundary to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Refusal is what a broker's error says of a dead letter it did not take.
type Refusal uint8

// The refusals of a dead letter.
const (
	// Unreached: the broker could not be reached, or did not answer in
	// time, or asked to try again: an outage, tried again without end.
	Unreached Refusal = iota
	// Refused: the broker answered no (a destination that does not exist
	// or may not be written): tried again MaxAttempts times.
	Refused
	// RefusedTooLarge: the broker, or its client, refused the letter as too
	// large: sent again stripped, then counted as Refused.
	RefusedTooLarge
)

// SendLetter sends the dead letter l with send, which sends it as it is
// and says what its error means, until the broker takes it. A letter the
// broker refuses as too large is sent once more without the original's
// body, record key and headers (Strip); one it refuses otherwise is sent
// again after the retry backoff, and given up on after MaxAttempts
// refusals; one that does not reach the broker is sent again without end.
// wait waits out a pause, and reports false when the consumer stops. attrs
// find the message in the logs, and giveUp says, in the error log of a
// dead letter given up on, how the message is settled without it.
//
// err is nil when the broker took l. Otherwise it is the broker's last
// error, and gaveUp says whether the consumer gave up on l (it settles the
// message without a dead letter: the message is not lost, it stays where
// attrs say while the broker keeps it), or stops (it hands the message
// back).
func (o *Options[M]) SendLetter(ctx context.Context, l *Letter, send func() (Refusal, error), wait func(time.Duration) bool,
	attrs []slog.Attr, giveUp ...slog.Attr) (gaveUp bool, err error) {
	pkg := o.Names().Pkg
	for refusals, outages := 0, 0; ; {
		var why Refusal
		if why, err = send(); err == nil {
			return false, nil
		}
		switch why {
		case RefusedTooLarge:
			if !l.stripped {
				o.Logger().LogAttrs(ctx, slog.LevelWarn, pkg+": the broker refused the dead letter as too large; "+
					"sending it without the original's body, key and headers", append(attrs, slog.Any("error", err))...)
				l.Strip()
				continue
			}
			fallthrough
		case Refused:
			refusals++
			if refusals >= o.maxAttempts {
				o.Logger().LogAttrs(ctx, slog.LevelError, pkg+": the broker refused the dead letter "+strconv.Itoa(refusals)+
					" times; the message is settled without one (committed, terminated or rejected). It is not lost: find it where these attributes say, while the broker keeps it",
					append(slices.Concat(attrs, giveUp), slog.Any("error", err))...)
				return true, err
			}
			o.Logger().LogAttrs(ctx, slog.LevelWarn, pkg+": the broker refused the dead letter; trying again",
				append(attrs, slog.Int("refusals", refusals), slog.Any("error", err))...)
		default:
			outages++
			o.Logger().LogAttrs(ctx, slog.LevelWarn, pkg+": the dead letter did not reach the broker; trying again",
				append(attrs, slog.Int("outages", outages), slog.Any("error", err))...)
		}
		if !wait(o.Backoff(refusals + outages)) {
			return false, err
		}
	}
}
