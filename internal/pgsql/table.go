// Package pgsql is what idem's PostgreSQL packages (pgstore, outbox,
// kafkapg) share about SQL: the one parser of the table names their
// configurations take ([ParseTable]), the rendering of the SQL they keep in
// embedded .sql files ([Parse], [Render]) and the script their Migrate
// functions run ([MigrationScript]). It imports the standard library only,
// so that the root module keeps no dependency; the packages run the
// statements with pgx.
package pgsql

import (
	"fmt"
	"hash/fnv"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest table or schema name accepted, in bytes (of
// the name, quotes and their escapes not counted). PostgreSQL truncates
// identifiers past 63 bytes, and the packages name indexes, sequences and
// tables after a table with suffixes of up to 15 bytes.
const MaxNameLen = 48

// NameError is the error of [ParseTable]: the name given, and what is
// wrong with it.
type NameError struct {
	Name   string
	Reason string
}

func (e *NameError) Error() string { return fmt.Sprintf("table %q: %s", e.Name, e.Reason) }

// Table is a parsed table name: an unqualified name, or schema.name.
type Table struct {
	// Given is the name as written in the configuration.
	Given string
	// Schema and Name are the parts, unquoted (as PostgreSQL stores them);
	// Schema is "" when the name is not qualified, and the table is found
	// through the connection's search_path.
	Schema, Name string
}

// ParseTable parses name, a table name as written in SQL: one part, or a
// schema and a table separated by a dot. A part is either unquoted, of
// lowercase ASCII letters, digits and underscores and not starting with a
// digit (the names PostgreSQL does not fold or need quoted), or quoted in
// double quotes, of any UTF-8 text but control characters, single quotes,
// dollar signs and backslashes, a double quote written twice ("Order
// ""Items"""). Each part is 1 to [MaxNameLen] bytes. Nothing else is
// accepted, so that a name renders in SQL as one quoted identifier whatever
// it holds, also where the packages' SQL puts it in a string literal
// (nextval('…'), '…'::regclass) or in a dollar-quoted body (DO $$ … $$).
// The error is a *[NameError].
func ParseTable(name string) (Table, error) {
	fail := func(format string, args ...any) (Table, error) {
		return Table{}, &NameError{Name: name, Reason: fmt.Sprintf(format, args...)}
	}
	var parts []string
	rest := name
	for {
		if len(parts) == 2 {
			return fail("at most one dot (schema.table)")
		}
		part, n, err := parsePart(rest)
		if err != "" {
			return fail("%s", err)
		}
		parts = append(parts, part)
		rest = rest[n:]
		if rest == "" {
			break
		}
		if rest[0] != '.' {
			return fail("unexpected %q after %q", rest[:1], name[:len(name)-len(rest)])
		}
		rest = rest[1:]
		if rest == "" {
			return fail("empty name after the dot")
		}
	}
	t := Table{Given: name, Name: parts[len(parts)-1]}
	if len(parts) == 2 {
		t.Schema = parts[0]
	}
	return t, nil
}

// ParseTableOr parses name as [ParseTable] does, or def when name is "":
// a configuration's table, with the package's default. Given is the name
// parsed.
func ParseTableOr(name, def string) (Table, error) {
	if name == "" {
		name = def
	}
	return ParseTable(name)
}

// LockKey returns a 64-bit key of the table's own in the space of prefix
// (a package's, as "pgstore.Migrate:"): FNV-1a of prefix and the table's
// quoted name, [Table.Ident]. The packages derive their advisory locks
// from it, so that processes working on the same table, and only those,
// take the same lock.
func (t Table) LockKey(prefix string) int64 {
	h := fnv.New64a()
	h.Write([]byte(prefix + t.Ident()))
	return int64(h.Sum64())
}

// parsePart parses the part s starts with and returns it unquoted, how many
// bytes of s it took, or why it is not a name.
func parsePart(s string) (part string, n int, why string) {
	if s == "" || s[0] == '.' {
		return "", 0, "empty name"
	}
	if s[0] != '"' {
		for n < len(s) && s[n] != '.' {
			switch c := s[n]; {
			case c >= 'a' && c <= 'z', c == '_':
			case c >= '0' && c <= '9':
				if n == 0 {
					return "", 0, "an unquoted name must not start with a digit"
				}
			default:
				return "", 0, "an unquoted name is lowercase ASCII letters, digits and underscores (quote any other name in double quotes)"
			}
			n++
		}
		part = s[:n]
	} else {
		var b strings.Builder
		n = 1
		for {
			if n >= len(s) {
				return "", 0, "a quoted name without its closing quote"
			}
			r, size := utf8.DecodeRuneInString(s[n:])
			switch {
			case r == utf8.RuneError && size == 1:
				return "", 0, "a quoted name is UTF-8 text"
			case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
				return "", 0, "a quoted name holds no control character"
			case r == '\'' || r == '$' || r == '\\':
				return "", 0, "a quoted name holds no single quote, dollar sign or backslash"
			case r == '"' && n+1 < len(s) && s[n+1] == '"':
				b.WriteByte('"')
				n += 2
				continue
			case r == '"':
				n++
				part = b.String()
				if part == "" {
					return "", 0, "empty name"
				}
				if len(part) > MaxNameLen {
					return "", 0, fmt.Sprintf("name %q longer than %d bytes", part, MaxNameLen)
				}
				return part, n, ""
			}
			b.WriteString(s[n : n+size])
			n += size
		}
	}
	if len(part) > MaxNameLen {
		return "", 0, fmt.Sprintf("name %q longer than %d bytes", part, MaxNameLen)
	}
	return part, n, ""
}

// Quote returns part as a quoted identifier: "part", a double quote in it
// written twice.
func Quote(part string) string {
	return `"` + strings.ReplaceAll(part, `"`, `""`) + `"`
}

// Ident returns the table's quoted, schema-qualified (when a schema was
// given) name: "s"."t".
func (t Table) Ident() string { return t.Sibling("") }

// Sibling returns the quoted name of the table's name with suffix added,
// qualified as the table is: a table or sequence that lives beside it.
func (t Table) Sibling(suffix string) string {
	if t.Schema == "" {
		return Quote(t.Name + suffix)
	}
	return Quote(t.Schema) + "." + Quote(t.Name+suffix)
}

// Local returns the quoted, unqualified name of the table's name with
// suffix added: an index, which lives in its table's schema and is named
// without it.
func (t Table) Local(suffix string) string { return Quote(t.Name + suffix) }
