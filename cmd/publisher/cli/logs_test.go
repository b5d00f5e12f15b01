package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	stdlog "log"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/grpclog"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// What client-go (klog), controller-runtime, gRPC and the standard library's log package
// write comes out on stderr as the publisher's JSON lines, each under its own logger name.
// The logging libraries are set up once per process, so the test runs itself as a child
// process and reads that child's stderr.
func TestLibraryLogsOneFormat(t *testing.T) {
	if os.Getenv("PUBLISHER_TEST_LIBRARY_LOGS") == "1" {
		emitLibraryLogs(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLibraryLogsOneFormat$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PUBLISHER_TEST_LIBRARY_LOGS=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stdout: %s\nstderr: %s", stdout.String(), stderr.String())

	byMsg := map[string]string{}
	for line := range strings.Lines(stderr.String()) {
		var entry map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &entry), "every line is JSON: %q", line)
		assert.Equal(t, 1, strings.Count(line, `"logger":`), "one logger key: %s", line)
		for _, key := range []string{"level", "ts", "logger", "msg"} {
			assert.Contains(t, entry, key, line)
		}
		byMsg[entry["msg"].(string)] = entry["logger"].(string)
	}
	assert.Equal(t, map[string]string{
		"reflector started":               "publisher.client-go",
		"failed to watch":                 "publisher.client-go",
		"Failed to watch":                 "publisher.client-go.UnhandledError",
		"unstructured 1":                  "publisher.client-go",
		"updated current TLS certificate": "publisher.controller-runtime.certwatcher",
		"grpc failure":                    "publisher.grpc",
		"http: TLS handshake error":       "publisher.stdlib",
	}, byMsg, "klog's V(2), client-go's V(1) at info and gRPC's warnings are not written")
}

// emitLibraryLogs routes the libraries' logs to stderr and logs through each of them.
func emitLibraryLogs(t *testing.T) {
	log, err := newLogger("json", "info", os.Stderr)
	require.NoError(t, err)
	defer routeLibraryLogs(log)()
	klog.InfoS("reflector started", "type", "TrafficMap")
	klog.ErrorS(errors.New("forbidden"), "failed to watch")
	klog.Warningf("unstructured %d", 1)
	klog.V(2).InfoS("client-go detail")
	klog.Background().V(1).Info("client-go contextual detail")
	utilruntime.HandleErrorWithContext(context.Background(), errors.New("forbidden"), "Failed to watch", "reflector", "TrafficMap")
	ctrllog.Log.WithName("controller-runtime").WithName("certwatcher").Info("updated current TLS certificate")
	grpclog.Error("grpc failure")
	grpclog.Warning("grpc warning")
	stdlog.Print("http: TLS handshake error")
}
