package testenv

import (
	"bufio"
	"bytes"
	"os/exec"
	"testing"
)

// StartLines starts cmd, a child process of the test, with its standard
// error into the returned buffer, and sends each line of its standard
// output on the returned channel (of buffer lines), which is closed when
// the output ends. When the test ends, the child is killed and waited for
// unless it has been waited for before.
func StartLines(tb testing.TB, cmd *exec.Cmd, buffer int) (<-chan string, *bytes.Buffer) {
	tb.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	lines := make(chan string, buffer)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	tb.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return lines, stderr
}
