package drain

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

func seedPlan(t *testing.T) *Plan {
	t.Helper()
	p, err := Prepare(seedDrain, target(nil))
	require.NoError(t, err)
	return p
}

// The preview of the seed's drain, as the seed documents it (with this project's status
// command as the follow-up).
func TestWritePreviewSeed(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WritePreview(&b, seedPlan(t), PreviewInput{Context: "hub", DryRun: DryRunNone}))
	assert.Equal(t, `ALPHA guarded traffic action (not TrafficMap convergence)
FIELD             VALUE
Action            traffic drain
Context           hub
Workload NS       prod
Target            InferenceService/chat
UID               2f6c1d9e-4b7a-4c1e-9f3d-8a5b6c7d0e12
ResourceVersion   1284711
Dry-run           none
Override ID       maintenance-a
Cluster           worker-a
Reason            "planned maintenance"
Override count    0 -> 1
Annotation        ome.io/traffic-drain
Follow-up         publisher status chat -n prod --context=hub
API acceptance is not TrafficMap convergence or data-plane realization.
The exact InferenceService UID/resourceVersion is tested atomically.
Other annotations and traffic-drain override IDs are preserved.
Run the previewed traffic status command to observe controller evidence.
`, b.String())
}

func TestWritePreviewUndrainAndLongValues(t *testing.T) {
	reason := strings.Repeat("r", 70)
	p, err := Prepare(Request{Action: ActionUndrain, ID: "maintenance-a"},
		target(map[string]string{Annotation: `{"maintenance-a":{"cluster":"worker-a","reason":"` + reason + `"}}`}))
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, WritePreview(&b, p, PreviewInput{Context: "hub", DryRun: DryRunServer}))
	out := b.String()
	assert.Contains(t, out, "Action            traffic undrain\n")
	assert.Contains(t, out, "Cluster           worker-a\n", "the removed drain's cluster")
	assert.Contains(t, out, "Reason            <absent>\n")
	assert.Contains(t, out, "Override count    1 -> 0\n")
	assert.Contains(t, out, "Dry-run           server\n")

	p, err = Prepare(Request{Action: ActionDrain, ID: "m", Cluster: "worker-a", Reason: reason}, target(nil))
	require.NoError(t, err)
	b.Reset()
	require.NoError(t, WritePreview(&b, p, PreviewInput{Context: "hub"}))
	quoted := `"` + reason + `"`
	assert.Contains(t, b.String(), "Reason            "+quoted[:60]+"\n(continued)       "+quoted[60:]+"\n")
	for _, line := range strings.Split(b.String(), "\n") {
		assert.LessOrEqual(t, len([]rune(line)), 80, line)
	}
}

func TestWriteResultTable(t *testing.T) {
	now := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	require.NoError(t, WriteResult(&b, NewResult(seedPlan(t), DryRunNone, "1284712", "hub", now), "table"))
	assert.Equal(t, `FIELD         VALUE
action        traffic drain
target        InferenceService/prod/chat
dry-run       none
accepted      Yes
applied       Yes
override-id   maintenance-a
cluster       worker-a
overrides     0 -> 1
message       API accepted traffic annotation request; not TrafficM...
follow-up     publisher status chat -n prod --context=hub
hint          Use -o json or -o yaml for full values.
`, b.String())

	b.Reset()
	require.NoError(t, WriteResult(&b, NewResult(seedPlan(t), DryRunClient, "1284711", "hub", now), "wide"))
	assert.Contains(t, b.String(), "uid                2f6c1d9e-4b7a-4c1e-9f3d-8a5b6c7d0e12\nresource-version   1284711\n")
	assert.Contains(t, b.String(), "applied            No\n")
}

func TestWriteResultJSONAndYAML(t *testing.T) {
	now := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	r := NewResult(seedPlan(t), DryRunServer, "1284711", "hub", now)
	var b bytes.Buffer
	require.NoError(t, WriteResult(&b, r, "json"))
	var got map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &got))
	assert.Equal(t, map[string]any{
		"apiVersion": "cli.ome.io/v1alpha1", "kind": "ActionResult", "collectedAt": "2026-12-02T15:00:00Z",
		"action": "traffic drain",
		"target": map[string]any{"kind": "InferenceService", "namespace": "prod", "name": "chat",
			"uid": "2f6c1d9e-4b7a-4c1e-9f3d-8a5b6c7d0e12", "resourceVersion": "1284711"},
		"dryRun": "server", "accepted": true, "applied": false,
		"message":  "API dry-run accepted; no changes persisted.",
		"followUp": "publisher status chat -n prod --context=hub",
		"traffic":  map[string]any{"overrideID": "maintenance-a", "cluster": "worker-a", "overridesBefore": float64(0), "overridesAfter": float64(1)},
	}, got)
	assert.NotContains(t, b.String(), "planned maintenance", "the reason is never in the result")

	b.Reset()
	require.NoError(t, WriteResult(&b, r, "yaml"))
	var fromYAML map[string]any
	require.NoError(t, yaml.Unmarshal(b.Bytes(), &fromYAML))
	assert.Equal(t, got, fromYAML)

	assert.ErrorIs(t, WriteResult(&b, r, "xml"), ErrOutput)
	assert.ErrorIs(t, WriteResult(failingWriter{}, r, "table"), ErrWriteResult)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

func TestConfirm(t *testing.T) {
	for _, tc := range []struct {
		input string
		want  error
	}{
		{"y\r", nil},
		{"Y\n", nil},
		{"yes\r", nil},
		{"YeS\r", nil},
		{"n\r", ErrDeclined},
		{"\r", ErrDeclined},
		{"yess\r", ErrDeclined},
		{"y", ErrDeclined}, // end of input before Enter
		{"\x04", ErrDeclined},
		{"y\x7f\r", ErrDeclined},
		{"\x03", context.Canceled},
		{strings.Repeat("y", 17) + "\r", ErrDeclined},
	} {
		var echo bytes.Buffer
		err := Confirm(context.Background(), strings.NewReader(tc.input), &echo)
		if tc.want == nil {
			assert.NoError(t, err, "%q", tc.input)
		} else {
			assert.ErrorIs(t, err, tc.want, "%q", tc.input)
		}
	}
}

func TestConfirmHonoursTheDeadline(t *testing.T) {
	r, w := io.Pipe()
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, Confirm(ctx, r, io.Discard), context.DeadlineExceeded)
}
