package httproute_test

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/weights"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ (and delete stale ones)")

func compute(t testing.TB, drains []weights.Drain, entries ...weights.Entry) weights.Result {
	t.Helper()
	res, err := weights.Compute(weights.Input{Entries: entries, Drains: drains})
	require.NoError(t, err)
	return res
}

func seed() []weights.Entry {
	return []weights.Entry{
		{Cluster: "worker-b", Endpoint: "https://chat.worker-b.example.com", Weight: 1},
		{Cluster: "worker-a", Endpoint: "https://chat.worker-a.example.com", Weight: 1},
	}
}

var (
	prodSource = httproute.Source{Namespace: "prod", Name: "chat", Service: "chat", GlobalHost: "chat.example.com", UID: "6f1c2a4e-0000-4000-8000-000000000001"}
	prodConfig = httproute.Config{Gateway: types.NamespacedName{Namespace: "prod", Name: "global"}}
	drainA     = []weights.Drain{{ID: "maintenance-a", Cluster: "worker-a", Reason: "planned maintenance"}}
)

// TestBuildGolden compares every generated route and Service set with testdata/<case>.yaml.
// Run with -update to regenerate them.
func TestBuildGolden(t *testing.T) {
	tmpl := template.Must(template.New("h").Parse("{{.Service}}.{{.Namespace}}.global.example.com"))
	tests := []struct {
		name   string
		cfg    httproute.Config
		src    httproute.Source
		res    weights.Result
		drains []weights.Drain
		kinds  httproute.Backends
	}{
		{name: "seed", cfg: prodConfig, src: prodSource, res: compute(t, nil, seed()...)},
		{name: "seed-drained", cfg: prodConfig, src: prodSource, res: compute(t, drainA, seed()...), drains: drainA},
		{name: "all-zero", cfg: prodConfig, src: prodSource, drains: drainA,
			res: compute(t, drainA, weights.Entry{Cluster: "worker-a", Endpoint: "http://a.example.com:8080", Weight: 3})},
		{name: "empty-map", cfg: prodConfig, src: prodSource, res: compute(t, nil)},
		{
			name: "template-section-rewrite",
			cfg: httproute.Config{Gateway: types.NamespacedName{Namespace: "infra", Name: "edge"}, GatewaySection: "https",
				HostTemplate: tmpl, RewriteHostname: true},
			src: httproute.Source{Namespace: "team-a", Name: "checkout", Service: "checkout"},
			res: compute(t, nil,
				weights.Entry{Cluster: "eu-west.prod", Endpoint: "http://checkout.eu.example.com", Weight: 7},
				weights.Entry{Cluster: "us-east", Endpoint: "https://checkout.us.example.com:8443/", Weight: 3}),
		},
		{name: "kind-endpointslice", cfg: prodConfig, src: prodSource, drains: drainA, res: compute(t, drainA, append(seed(),
			weights.Entry{Cluster: "worker-c", Endpoint: "http://198.18.0.7:8080", Weight: 2},
			weights.Entry{Cluster: "worker-d", Endpoint: "http://[2001:db8::7]:8000", Weight: 1})...),
			kinds: httproute.Backends{Kind: httproute.BackendEndpointSlice, Addresses: map[string][]netip.Addr{
				"chat.worker-a.example.com": {netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")},
				"chat.worker-b.example.com": {netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("2001:db8::1")},
			}}},
		{name: "kind-envoy-gateway-backend", cfg: prodConfig, src: prodSource, res: compute(t, nil, append(seed(),
			weights.Entry{Cluster: "worker-c", Endpoint: "http://198.18.0.7:8080", Weight: 2})...),
			kinds: httproute.Backends{Kind: httproute.BackendEnvoyGateway}},
	}
	seen := map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := httproute.Inputs{Generation: 4, Drains: tc.drains, Backends: tc.kinds}
			desired, err := httproute.Build(tc.cfg, tc.src, tc.res, in)
			require.NoError(t, err)
			var docs []string
			objs := append([]any{desired.Route}, anySlice(desired.Services)...)
			objs = append(append(objs, anySlice(desired.EndpointSlices)...), anySlice(desired.Backends)...)
			for _, obj := range objs {
				out, err := yaml.Marshal(obj)
				require.NoError(t, err)
				docs = append(docs, string(out))
			}
			got := strings.Join(docs, "---\n")
			path := filepath.Join("testdata", tc.name+".yaml")
			seen[path] = true
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "missing golden file; run go test ./httproute/ -update")
			assert.Equal(t, string(want), got)

			again, err := httproute.Build(tc.cfg, tc.src, tc.res, in)
			require.NoError(t, err)
			assert.Equal(t, desired, again, "Build is deterministic")
		})
	}
	if *update {
		stale, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
		for _, p := range stale {
			if !seen[p] {
				require.NoError(t, os.Remove(p))
			}
		}
	}
}

func anySlice[T any](in []T) []any {
	out := make([]any, len(in))
	for i, v := range in {
		out[i] = v
	}
	return out
}

func TestBuildRefusals(t *testing.T) {
	many := make([]weights.Entry, 17)
	for i := range many {
		many[i] = weights.Entry{Cluster: fmt.Sprintf("w-%02d", i), Endpoint: "https://x.example.com", Weight: 1}
	}
	long := strings.Repeat("a", 64)
	tests := []struct {
		name    string
		cfg     httproute.Config
		src     httproute.Source
		res     weights.Result
		wantErr error
		wantMsg string
		kinds   httproute.Backends
	}{
		{"17 entries", prodConfig, prodSource, compute(t, nil, many...), httproute.ErrTooManyEntries, "trafficmap prod/chat has 17 entries (spec.entries)", httproute.Backends{}},
		{"ip endpoint", prodConfig, prodSource, compute(t, nil, weights.Entry{Cluster: "a", Endpoint: "http://10.0.0.1", Weight: 1}), httproute.ErrInvalidBackend, `entry "a" endpoint "http://10.0.0.1": an ExternalName backend needs a DNS name`, httproute.Backends{}},
		{"no hostname", prodConfig, httproute.Source{Namespace: "prod", Name: "chat", Service: "chat"}, compute(t, nil), httproute.ErrNoHostname, "inferenceservice prod/chat has no ome.io/global-host annotation and no --host-template is set", httproute.Backends{}},
		{"ip hostname", prodConfig, httproute.Source{Namespace: "prod", Name: "chat", Service: "chat", GlobalHost: "192.0.2.1"}, compute(t, nil), httproute.ErrInvalidHostname, "an IP address is not allowed", httproute.Backends{}},
		{"bad hostname", prodConfig, httproute.Source{Namespace: "prod", Name: "chat", Service: "chat", GlobalHost: "Chat_Example"}, compute(t, nil), httproute.ErrInvalidHostname, `"Chat_Example"`, httproute.Backends{}},
		{"name not a label value", prodConfig, httproute.Source{Namespace: "prod", Name: long, Service: long, GlobalHost: "a.example.com"}, compute(t, nil), httproute.ErrInvalidSource, "cannot be used as a label value", httproute.Backends{}},
		{"unresolved host", prodConfig, prodSource, compute(t, nil, seed()...), httproute.ErrUnresolved,
			`trafficmap prod/chat entry "worker-a" endpoint host "chat.worker-a.example.com"`,
			httproute.Backends{Kind: httproute.BackendEndpointSlice, Addresses: map[string][]netip.Addr{"chat.worker-b.example.com": {netip.MustParseAddr("198.18.0.1")}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := httproute.Build(tc.cfg, tc.src, tc.res, httproute.Inputs{Backends: tc.kinds})
			require.ErrorIs(t, err, tc.wantErr)
			assert.Contains(t, err.Error(), tc.wantMsg)
		})
	}
	// Sixteen entries is the limit, not beyond it.
	_, err := httproute.Build(prodConfig, prodSource, compute(t, nil, many[:16]...), httproute.Inputs{})
	require.NoError(t, err)
}

func TestRecordedDrainsRoundTrip(t *testing.T) {
	d, err := httproute.Build(prodConfig, prodSource, compute(t, drainA, seed()...), httproute.Inputs{Drains: drainA})
	require.NoError(t, err)
	got, ok := httproute.RecordedDrains(d.Route)
	require.True(t, ok)
	assert.Equal(t, drainA, got)

	_, ok = httproute.RecordedDrains(nil)
	assert.False(t, ok)
}

func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{2, 8, 16} {
		entries := make([]weights.Entry, n)
		for i := range entries {
			entries[i] = weights.Entry{Cluster: fmt.Sprintf("worker-%02d", i), Endpoint: fmt.Sprintf("https://chat.worker-%02d.example.com", i), Weight: int64(i + 1)}
		}
		res := compute(b, drainA, entries...)
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := httproute.Build(prodConfig, prodSource, res, httproute.Inputs{Generation: 1, Drains: drainA}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
