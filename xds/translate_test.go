package xds_test

import (
	"context"
	"flag"
	"fmt"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"

	"github.com/trafficmap/publisher/weights"
	"github.com/trafficmap/publisher/xds"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ (and delete stale ones)")

func service(t testing.TB, ns, name string, drains []weights.Drain, entries ...weights.Entry) xds.Service {
	t.Helper()
	res, err := weights.Compute(weights.Input{Entries: entries, Drains: drains})
	require.NoError(t, err)
	return xds.Service{Namespace: ns, Name: name, Service: name, Hostnames: []string{name + ".example.com"}, Result: res}
}

func seedEntries() []weights.Entry {
	return []weights.Entry{
		{Cluster: "worker-a", Endpoint: "https://chat.worker-a.example.com", Weight: 1},
		{Cluster: "worker-b", Endpoint: "http://chat.worker-b.example.com:8080", Weight: 1},
	}
}

// withheld is s with its hostnames out of the plan and in Withheld, as the planner hands a
// map whose names another map holds.
func withheld(s xds.Service, names ...string) xds.Service {
	s.Hostnames = slices.DeleteFunc(s.Hostnames, func(h string) bool { return slices.Contains(names, h) })
	s.Withheld = names
	return s
}

// withHostnames are the services the Envoy flavour carries (as the xDS sink passes them).
func withHostnames(services []xds.Service) []xds.Service {
	return slices.DeleteFunc(slices.Clone(services), func(s xds.Service) bool { return len(s.Hostnames) == 0 })
}

var drainA = []weights.Drain{{ID: "maintenance-a", Cluster: "worker-a", Reason: "planned maintenance"}}

func goldenCases(t testing.TB) map[string][]xds.Service {
	return map[string][]xds.Service{
		"seed":         {service(t, "prod", "chat", nil, seedEntries()...)},
		"seed-drained": {service(t, "prod", "chat", drainA, seedEntries()...)},
		"all-drained": {service(t, "prod", "chat", append(drainA, weights.Drain{ID: "m-b", Cluster: "worker-b", Reason: "r"}),
			seedEntries()...)},
		// Two maps share chat.example.com; the older (prod/chat) holds it, so staging/chat
		// keeps only its gRPC name chat.staging and has no Envoy virtual host.
		"hostname-conflict": {
			service(t, "prod", "chat", nil, seedEntries()...),
			withheld(service(t, "staging", "chat", nil, weights.Entry{Cluster: "worker-c", Endpoint: "https://chat.worker-c.example.com", Weight: 1}),
				"chat.example.com"),
		},
		"two-services": {
			service(t, "team-b", "embed", nil, weights.Entry{Cluster: "eu", Endpoint: "https://embed.eu.example.com", Weight: 7},
				weights.Entry{Cluster: "us", Endpoint: "https://embed.us.example.com", Weight: 3}),
			service(t, "prod", "chat", nil, seedEntries()...),
		},
	}
}

// TestGolden compares both flavours with testdata/<case>.<flavour>.yaml; -update rewrites.
func TestGolden(t *testing.T) {
	seen := map[string]bool{}
	for name, services := range goldenCases(t) {
		for flavour, translate := range map[string]func([]xds.Service) (xds.Resources, error){
			"envoy": func(s []xds.Service) (xds.Resources, error) {
				return xds.TranslateEnvoy(xds.DefaultEnvoyOptions, withHostnames(s))
			},
			"grpc": xds.TranslateGRPC,
		} {
			t.Run(name+"/"+flavour, func(t *testing.T) {
				res, err := translate(services)
				require.NoError(t, err)
				require.NoError(t, xds.Validate(res), "every generated resource passes ValidateAll and the semantic checks")
				got := render(t, res)
				path := filepath.Join("testdata", name+"."+flavour+".yaml")
				seen[path] = true
				if *update {
					require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
				}
				want, err := os.ReadFile(path)
				require.NoError(t, err, "missing golden file; run go test ./xds/ -update")
				assert.Equal(t, string(want), got)
			})
		}
	}
	if *update {
		files, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
		for _, f := range files {
			if !seen[f] {
				require.NoError(t, os.Remove(f))
			}
		}
	}
}

// render turns resources into stable YAML (protojson output is re-encoded, which removes
// its deliberately unstable whitespace).
func render(t *testing.T, res xds.Resources) string {
	t.Helper()
	var docs []string
	add := func(kind string, m proto.Message) {
		j, err := protojson.Marshal(m)
		require.NoError(t, err)
		y, err := yaml.JSONToYAML(j)
		require.NoError(t, err)
		docs = append(docs, "# "+kind+"\n"+string(y))
	}
	for _, l := range res.Listeners {
		add("listener", l)
	}
	for _, r := range res.Routes {
		add("route configuration", r)
	}
	for _, c := range res.Clusters {
		add("cluster", c)
	}
	return strings.Join(docs, "---\n")
}

func TestNoPositiveWeightIsAFixed503(t *testing.T) {
	all := goldenCases(t)["all-drained"]
	for _, tr := range []func([]xds.Service) (xds.Resources, error){
		func(s []xds.Service) (xds.Resources, error) { return xds.TranslateEnvoy(xds.DefaultEnvoyOptions, s) },
		xds.TranslateGRPC,
	} {
		res, err := tr(all)
		require.NoError(t, err)
		r := res.Routes[0].VirtualHosts[0].Routes[0]
		require.Nil(t, r.GetRoute(), "never a weighted_clusters summing to 0")
		assert.Equal(t, uint32(503), r.GetDirectResponse().GetStatus())
		assert.Equal(t, "no routable cluster: all drained (worker-a, worker-b)", r.GetDirectResponse().GetBody().GetInlineString())
	}
}

func TestDrainedClusterLeavesWeightedClusters(t *testing.T) {
	res, err := xds.TranslateEnvoy(xds.DefaultEnvoyOptions, goldenCases(t)["seed-drained"])
	require.NoError(t, err)
	wc := res.Routes[0].VirtualHosts[0].Routes[0].GetRoute().GetWeightedClusters()
	require.Len(t, wc.Clusters, 1)
	assert.Equal(t, "prod/chat/worker-b", wc.Clusters[0].Name)
	assert.Equal(t, uint32(1), wc.Clusters[0].Weight.GetValue())
	assert.Len(t, res.Clusters, 2, "the drained cluster stays defined, so a route can move back at once")
}

func TestValidateCatchesWhatEnvoyAndGRPCReject(t *testing.T) {
	base := func() xds.Resources {
		res, err := xds.TranslateEnvoy(xds.DefaultEnvoyOptions, goldenCases(t)["seed"])
		require.NoError(t, err)
		return res
	}
	wc := func(res xds.Resources) *routev3.WeightedCluster {
		return res.Routes[0].VirtualHosts[0].Routes[0].GetRoute().GetWeightedClusters()
	}
	tests := []struct {
		name   string
		mutate func(xds.Resources) xds.Resources
		want   string
	}{
		{"zero sum", func(r xds.Resources) xds.Resources {
			for _, c := range wc(r).Clusters {
				c.Weight = wrapperspb.UInt32(0)
			}
			return r
		}, "sum of weights in the weighted_clusters must be greater than 0"},
		{"unset weight", func(r xds.Resources) xds.Resources { wc(r).Clusters[0].Weight = nil; return r }, `has no explicit weight`},
		{"missing cluster", func(r xds.Resources) xds.Resources { r.Clusters = r.Clusters[1:]; return r }, `cluster "prod/chat/worker-a" does not exist`},
		{"missing route configuration", func(r xds.Resources) xds.Resources { r.Routes = nil; return r }, `route configuration "trafficmap-routes" does not exist`},
		{"field rule", func(r xds.Resources) xds.Resources { r.Clusters[0].Name = ""; return r }, `cluster ""`},
		{"two endpoints in a logical DNS cluster", func(r xds.Resources) xds.Resources {
			la := proto.Clone(r.Clusters[0].LoadAssignment).(*endpointv3.ClusterLoadAssignment)
			la.Endpoints[0].LbEndpoints = append(la.Endpoints[0].LbEndpoints, la.Endpoints[0].LbEndpoints[0])
			r.Clusters[0].LoadAssignment = la
			return r
		}, `cluster "prod/chat/worker-a": a logical DNS cluster needs exactly one locality with one endpoint`},
		{"unreadable DNS cluster config", func(r xds.Resources) xds.Resources {
			cfg, err := anypb.New(wrapperspb.String("not a DnsCluster"))
			require.NoError(t, err)
			ct := proto.Clone(r.Clusters[0].GetClusterType()).(*clusterv3.Cluster_CustomClusterType) // shared by every cluster
			ct.TypedConfig = cfg
			r.Clusters[0].ClusterDiscoveryType = &clusterv3.Cluster_ClusterType{ClusterType: ct}
			return r
		}, `cluster "prod/chat/worker-a": cluster type envoy.clusters.dns`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := xds.Validate(tc.mutate(base()))
			require.ErrorIs(t, err, xds.ErrInvalidResources)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// Two services with the same hostname: Envoy rejects the whole shared route configuration
// ("Only unique values for domains are permitted"), and gRPC listeners are one namespace, so
// Validate refuses duplicates of every kind before anything is served.
func TestValidateRefusesDuplicates(t *testing.T) {
	two := goldenCases(t)["two-services"]
	two[0].Hostnames = []string{"CHAT.example.com"} // Envoy compares domains case-insensitively
	envoy, err := xds.TranslateEnvoy(xds.DefaultEnvoyOptions, two)
	require.NoError(t, err)
	err = xds.Validate(envoy)
	require.ErrorIs(t, err, xds.ErrDuplicate)
	assert.Contains(t, err.Error(), `route configuration "trafficmap-routes": duplicate name: domain "chat.example.com"`)

	grpc, err := xds.TranslateGRPC(goldenCases(t)["two-services"])
	require.NoError(t, err)
	grpc.Listeners = append(grpc.Listeners, grpc.Listeners[0])
	grpc.Clusters = append(grpc.Clusters, grpc.Clusters[0])
	grpc.Routes[0].VirtualHosts = append(grpc.Routes[0].VirtualHosts, grpc.Routes[0].VirtualHosts[0])
	err = xds.Validate(grpc)
	require.ErrorIs(t, err, xds.ErrInvalidResources)
	for _, want := range []string{`listener "chat.example.com": duplicate name`, `cluster "prod/chat/worker-a": duplicate name`,
		`route configuration "prod/chat": duplicate name: virtual host "prod/chat"`} {
		assert.Contains(t, err.Error(), want)
	}
}

// A withheld name is neither a gRPC listener nor an Envoy domain of the service.
func TestWithheldNamesAreNotServed(t *testing.T) {
	s := service(t, "staging", "chat", nil, seedEntries()...)
	s.Withheld = []string{"chat.staging"}
	grpc, err := xds.TranslateGRPC([]xds.Service{s})
	require.NoError(t, err)
	require.Len(t, grpc.Listeners, 1)
	assert.Equal(t, "chat.example.com", grpc.Listeners[0].Name)
	assert.NotEqual(t, s.Digest(), service(t, "staging", "chat", nil, seedEntries()...).Digest(), "the digest covers what is withheld")

	s.Withheld = append(s.Withheld, "chat.example.com")
	s.Hostnames = nil
	grpc, err = xds.TranslateGRPC([]xds.Service{s})
	require.NoError(t, err)
	assert.Empty(t, grpc.Listeners, "no name left to dial")
	assert.Empty(t, grpc.Routes)
}

func TestVersionIsContentDerived(t *testing.T) {
	a := goldenCases(t)["two-services"]
	reversed := []xds.Service{a[1], a[0]}
	v1 := version(t, a)
	assert.Equal(t, v1, version(t, reversed), "input order does not matter")
	assert.Equal(t, v1, version(t, a), "same content, same version")
	assert.NotEqual(t, v1, version(t, goldenCases(t)["seed"]), "different content, different version")
}

func version(t *testing.T, s []xds.Service) xds.Versions {
	t.Helper()
	res, err := xds.TranslateEnvoy(xds.DefaultEnvoyOptions, s)
	require.NoError(t, err)
	v, err := xds.TypeVersions(res)
	require.NoError(t, err)
	return v
}

// A drain changes the weights only: the route version changes, the listener and cluster
// versions stay, in both flavours.
func TestDrainChangesOnlyTheRouteVersion(t *testing.T) {
	old := service(t, "prod", "chat", nil, seedEntries()...)
	drained := service(t, "prod", "chat", drainA, seedEntries()...)
	for name, translate := range map[string]func([]xds.Service) (xds.Resources, error){
		"envoy": func(s []xds.Service) (xds.Resources, error) { return xds.TranslateEnvoy(xds.DefaultEnvoyOptions, s) },
		"grpc":  xds.TranslateGRPC,
	} {
		t.Run(name, func(t *testing.T) {
			before, err := translate([]xds.Service{old})
			require.NoError(t, err)
			after, err := translate([]xds.Service{drained})
			require.NoError(t, err)
			vb, err := xds.TypeVersions(before)
			require.NoError(t, err)
			va, err := xds.TypeVersions(after)
			require.NoError(t, err)
			assert.Equal(t, vb[resource.ListenerType], va[resource.ListenerType])
			assert.Equal(t, vb[resource.ClusterType], va[resource.ClusterType])
			assert.NotEqual(t, vb[resource.RouteType], va[resource.RouteType])
		})
	}
}

// BenchmarkTranslate translates 1,000 TrafficMaps with 8 clusters each, validates and
// versions the result, as one snapshot build does.
func BenchmarkTranslate(b *testing.B) {
	services := make([]xds.Service, 1000)
	for i := range services {
		entries := make([]weights.Entry, 8)
		for j := range entries {
			entries[j] = weights.Entry{Cluster: fmt.Sprintf("worker-%d", j), Endpoint: fmt.Sprintf("https://svc-%d.worker-%d.example.com", i, j), Weight: int64(j + 1)}
		}
		services[i] = service(b, "ns-"+fmt.Sprint(i%50), fmt.Sprintf("svc-%d", i), drainA, entries...)
	}
	for flavour, translate := range map[string]func([]xds.Service) (xds.Resources, error){
		"envoy": func(s []xds.Service) (xds.Resources, error) { return xds.TranslateEnvoy(xds.DefaultEnvoyOptions, s) },
		"grpc":  xds.TranslateGRPC,
	} {
		b.Run(flavour, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := translate(services)
				if err != nil {
					b.Fatal(err)
				}
				if err := xds.Validate(res); err != nil {
					b.Fatal(err)
				}
				if _, err := xds.TypeVersions(res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestPartitionKeepsInvalidServicesOut(t *testing.T) {
	good := service(t, "prod", "chat", nil, seedEntries()...)
	bad := service(t, "prod", "embed", nil, seedEntries()...)
	bad.Hostnames = []string{"bad\nhost"} // a line break in a virtual host domain fails Envoy's validation
	valid, invalid := xds.Partition(xds.DefaultEnvoyOptions, []xds.Service{good, bad})
	require.Len(t, valid, 1)
	assert.Equal(t, "prod/chat", valid[0].Key())
	require.Contains(t, invalid, "prod/embed")
	assert.ErrorIs(t, invalid["prod/embed"], xds.ErrInvalidResources)
	assert.Contains(t, invalid["prod/embed"].Error(), "envoy resources")
}

// BenchmarkDrainToSnapshot is the xDS cost of one drain at 1,000 TrafficMaps with 8
// clusters each, along the publisher's rebuild path: the drained map's weights are computed
// again, every service is checked on its own (Partition), both flavours are translated and
// set as snapshots (validation and versioning included). The Translator reuses what it
// built for the unchanged services, as the publisher does.
func BenchmarkDrainToSnapshot(b *testing.B) {
	const maps, clusters = 1000, 8
	inputs := make([]weights.Input, maps)
	services := make([]xds.Service, maps)
	for i := range inputs {
		for j := range clusters {
			inputs[i].Entries = append(inputs[i].Entries, weights.Entry{Cluster: fmt.Sprintf("worker-%d", j),
				Endpoint: fmt.Sprintf("https://svc-%d.worker-%d.example.com", i, j), Weight: int64(j + 1)})
		}
		services[i] = service(b, fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("svc-%d", i), nil, inputs[i].Entries...).Sealed()
	}
	srv := xds.NewServer(xds.ServerConfig{})
	tr := xds.NewTranslator(xds.DefaultEnvoyOptions)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := i % maps
		in := inputs[k]
		if i/maps%2 == 0 { // drain worker-0 on one map, then undrain it on the next lap
			in.Drains = []weights.Drain{{ID: "m", Cluster: "worker-0", Reason: "r"}}
		}
		res, err := weights.Compute(in)
		if err != nil {
			b.Fatal(err)
		}
		services[k].Result = res
		services[k] = services[k].Sealed() // as the publisher serves them
		valid, _ := tr.Partition(services)
		envoy, err := tr.Envoy(valid)
		if err != nil {
			b.Fatal(err)
		}
		grpcRes, err := tr.GRPC(valid)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := srv.SetResources(ctx, xds.FlavourEnvoy, envoy); err != nil {
			b.Fatal(err)
		}
		if _, err := srv.SetResources(ctx, xds.FlavourGRPC, grpcRes); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// A sealed service keeps only what the resources read of its weights: it translates to the
// same resources and has the same digest as the service it was sealed from, and its Result
// is cleared.
func TestSealedServiceTranslatesTheSame(t *testing.T) {
	for name, services := range goldenCases(t) {
		services = withHostnames(services)
		sealed := make([]xds.Service, len(services))
		for i, s := range services {
			sealed[i] = s.Sealed()
			assert.Equal(t, s.Digest(), sealed[i].Digest(), name)
			assert.Empty(t, sealed[i].Result.Entries, name)
			assert.Equal(t, sealed[i], sealed[i].Sealed(), "sealing twice changes nothing")
		}
		for flavour, translate := range map[string]func([]xds.Service) (xds.Resources, error){
			"envoy": func(s []xds.Service) (xds.Resources, error) { return xds.TranslateEnvoy(xds.DefaultEnvoyOptions, s) },
			"grpc":  xds.TranslateGRPC,
		} {
			want, err := translate(services)
			require.NoError(t, err)
			got, err := translate(sealed)
			require.NoError(t, err)
			assert.Equal(t, render(t, want), render(t, got), name+"/"+flavour)
		}
	}
}
