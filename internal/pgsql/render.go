package pgsql

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"strings"
	"text/template"
)

// Parse parses text, SQL with text/template actions over a map of strings,
// as the packages write their .sql files: {{define "name"}}…{{end}} per
// statement, {{.table}} for a quoted name, and {{template "fragment" args .
// "key" "value"}} for a fragment that takes arguments (see [Args]). A key
// missing from the map is an error, not an empty string. It panics on a
// syntax error: the text is a package's own, embedded, and every test
// parses it.
func Parse(name, text string) *template.Template {
	return template.Must(template.New(name).Option("missingkey=error").
		Funcs(template.FuncMap{"args": Args}).Parse(text))
}

// Args returns m with the pairs kv (a key, its value, …) added: how a
// definition passes arguments to a fragment, and how [Render] adds a
// statement's arguments to a table's names.
func Args(m map[string]string, kv ...string) (map[string]string, error) {
	if len(kv)%2 != 0 {
		return nil, errors.New("args: a key without its value")
	}
	out := maps.Clone(m)
	if out == nil {
		out = make(map[string]string, len(kv)/2)
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out, nil
}

// Render returns the definition name of tmpl rendered with vars and the
// pairs kv added (see [Args]), without its surrounding space. Nothing of a
// caller's ever enters the text but validated, quoted names and numbers
// the package formats itself: the values of a statement go in its $n
// parameters. The statements are the package's own, rendered by its
// tests: an error is a bug of that package, and Render panics with pkg
// (the package's name) at the start of the message.
func Render(pkg string, tmpl *template.Template, name string, vars map[string]string, kv ...string) string {
	all, err := Args(vars, kv...)
	var b strings.Builder
	if err == nil {
		err = tmpl.ExecuteTemplate(&b, name, all)
	}
	if err != nil {
		panic(fmt.Sprintf("%s: rendering %s: %v", pkg, name, err))
	}
	return strings.TrimSpace(b.String())
}

// MigrationScript returns the script of a package's Migrate: the
// transaction-level advisory lock lockKey, then every file of fsys that
// matches pattern (migrations/*.sql), in name order, parsed as [Parse]
// does and rendered whole with vars. Run as one simple-protocol message
// (Exec without arguments), PostgreSQL runs it as one implicit
// transaction: the lock is held until the last statement, so that
// processes migrating the same table run one after the other. Every
// migration must be idempotent: the script runs them all, each time.
func MigrationScript(pkg string, fsys fs.FS, pattern string, lockKey int64, vars map[string]string) (string, error) {
	files, err := fs.Glob(fsys, pattern) // sorted by name
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", fmt.Errorf("%s: no migration matches %s", pkg, pattern)
	}
	var script strings.Builder
	fmt.Fprintf(&script, "SELECT pg_advisory_xact_lock(%d);\n", lockKey)
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return "", err
		}
		t, err := template.New(f).Option("missingkey=error").Funcs(template.FuncMap{"args": Args}).Parse(string(b))
		if err != nil {
			return "", fmt.Errorf("%s: %w", pkg, err)
		}
		var out strings.Builder
		if err := t.Execute(&out, vars); err != nil {
			return "", fmt.Errorf("%s: rendering %s: %w", pkg, f, err)
		}
		script.WriteString(strings.TrimSpace(out.String()))
		script.WriteString("\n")
	}
	return script.String(), nil
}
