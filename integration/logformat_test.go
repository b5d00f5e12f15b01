package integration

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The publisher writes one log format on stderr, client-go's own messages included: run as
// a user who may not list anything, its informers fail with Forbidden, and client-go's
// reports of that come out as the publisher's JSON lines under the logger
// "publisher.client-go". Every line, up to the end of a graceful stop, is such a line.
func TestOneLogFormatOnStderr(t *testing.T) {
	nobody := newOpsUser(t, "log-format-nobody")
	ns := "log-format"
	cmd := exec.CommandContext(ctxFor(t), publisherBinary(t), "run", "--kubeconfig", nobody.kubeconfig,
		"--sinks", "httproute", "--gateway", ns+"/"+gatewayName, "--namespace", ns, "--http-address", "")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = waitTimeout
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var loggers []string
	check := func(line string) (logger string) {
		var entry map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &entry), "every stderr line is a JSON log entry: %q", line)
		require.Equal(t, 1, strings.Count(line, `"logger":`), "one logger key: %s", line)
		for _, key := range []string{"level", "ts", "logger", "msg"} {
			require.Contains(t, entry, key, line)
		}
		logger, _ = entry["logger"].(string)
		require.True(t, logger == "publisher" || strings.HasPrefix(logger, "publisher."), "logger %q is under the publisher's", logger)
		loggers = append(loggers, logger)
		return logger
	}

	deadline := time.After(waitTimeout)
	for found := false; !found; {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "the publisher stopped before client-go logged; it logged from %v", loggers)
			if found = strings.Contains(check(line), "client-go"); found {
				t.Logf("client-go's line: %s", line)
			}
		case <-deadline:
			require.FailNow(t, "no line from client-go's logger", "loggers so far: %v", loggers)
		}
	}

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	deadline = time.After(waitTimeout)
	for open := true; open; {
		select {
		case line, ok := <-lines: // until the publisher closes stderr
			if open = ok; ok {
				check(line)
			}
		case <-deadline:
			require.FailNow(t, "the publisher did not stop on SIGINT")
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		require.Failf(t, "the publisher exits 0 on SIGINT", "exit code %d", exit.ExitCode())
	}
	require.NoError(t, err)
}
