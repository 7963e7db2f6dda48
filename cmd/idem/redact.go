package main

import (
	"io"
	"strings"

	"github.com/idemgo/idem/storeurl"
)

// Every error and line of the CLI that names a --store or --broker URL
// names it through storeurl.Redact.

// secretsIn returns the secrets that args hold (see storeurl.Secrets):
// those of a URL, and of a libpq connection string given where a URL
// belongs (host=db password=…), which the tool refuses, but only after
// naming it. The CLI's output passes through a [scrubber] of them, so
// that no library's error that repeats a URL it could not use (a
// driver's parse error, a dial error) prints one.
func secretsIn(args []string) []string {
	var out []string
	for _, a := range args {
		if flag, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(flag, "-") && !strings.Contains(flag, "://") {
			a = v // --store=URL
		}
		out = append(out, storeurl.Secrets(a)...)
	}
	return out
}

// scrubber writes to w with every secret replaced by "xxxxx".
type scrubber struct {
	w       io.Writer
	secrets []string
}

func (s scrubber) Write(p []byte) (int, error) {
	text := string(p)
	for _, sec := range s.secrets {
		text = strings.ReplaceAll(text, sec, "xxxxx")
	}
	if _, err := io.WriteString(s.w, text); err != nil {
		return 0, err
	}
	return len(p), nil
}
